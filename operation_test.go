package touba_test

import (
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/protocol"
)

// The journal's operations are the wire's: the root imports nothing of the
// project, so this pins its two names to the protocol package's.
func TestOperationsAreTheProtocols(t *testing.T) {
	if touba.OperationInvoke != string(protocol.Invoke) || touba.OperationCompensate != string(protocol.Compensate) {
		t.Fatalf("root %q/%q, protocol %q/%q", touba.OperationInvoke, touba.OperationCompensate, protocol.Invoke, protocol.Compensate)
	}
}
