package report_test

import (
	"bytes"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/report"
)

// A compensation's receipt, error message and ids come from a handler or
// an operator's argument: printed with their control characters escaped,
// so an answer cannot move the cursor, recolour or clear the terminal.
func TestPrintCompensationEscapesControls(t *testing.T) {
	const esc = "\x1b[2J\x1b]0;owned\x07"
	c := &touba.Compensation{Scope: "q" + esc, EffectID: "q:bill" + esc, CompensationID: "q:bill:compensate" + esc,
		State: touba.EffectUnknown, Attempt: 1, ReceiptRef: "r\r\n" + esc, ErrorCode: "Code" + esc, Message: "msg\u202e" + esc}
	var out bytes.Buffer
	err := report.Compensation(&out, c)
	if err == nil {
		t.Fatal("an unknown compensation printed without an error")
	}
	for _, s := range []string{out.String(), err.Error()} {
		if strings.ContainsAny(s, "\x1b\x07\r\u202e") {
			t.Fatalf("printed a control character: %q", s)
		}
	}
	if got := strings.Count(out.String(), "\n"); got != 5 {
		t.Fatalf("%d lines, want 5: a newline of the receipt broke the layout:\n%s", got, out.String())
	}
}
