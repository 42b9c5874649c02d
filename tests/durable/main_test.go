// Package durable_test runs the durable-steps example (examples/durable,
// SPEC §2.3) through the real touba-trigger binary over real HTTP, on real
// SQLite files, with the example's own handler as the downstream systems:
// a wait for another trigger's event matched and timed out, a dunning
// sequence of sleeps cancelled by a payment, a sleep across SIGTERM and
// SIGKILL, a reload that changes a completed step, a nightly schedule
// across a restart, and an operator's resume from the third step of an
// order flow. Each test runs a copy of the example's program with short
// durations; everything it asserts is read from outside: the handler's
// record of calls, `queue show --json`, `effects ls --json`.
package durable_test

import (
	"testing"

	"github.com/touba/touba-trigger/internal/gobuild"
)

// handlerBin is the example's handler, built once for every test.
var handlerBin string

func TestMain(m *testing.M) {
	gobuild.Main(m, map[string]*string{"../../examples/durable/handler": &handlerBin})
}
