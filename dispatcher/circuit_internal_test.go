package dispatcher

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
)

// TestCircuitWindow: only calls that ended within window_ms count, and the
// circuit opens at the call that brings the failing share to
// failure_ratio with at least min_calls counted.
func TestCircuitWindow(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	d := &Dispatcher{opts: Options{Now: func() time.Time { return now }}, log: zerolog.Nop()}
	b := &Binding{Ref: "tool:w", Circuit: CircuitConfig{FailureRatio: 0.5, MinCalls: 4, Window: 10 * time.Second, Open: time.Minute}}
	c := d.circuits.of(b)
	state := func() string { c.mu.Lock(); defer c.mu.Unlock(); return c.state.State }
	for _, fail := range []bool{true, true, true} { // 3 failures: fewer than min_calls
		d.recordCall(c, false, fail)
	}
	if got := state(); got != touba.CircuitClosed {
		t.Fatalf("after 3 calls (min_calls 4): %s", got)
	}
	now = now.Add(11 * time.Second) // they leave the window
	for i, fail := range []bool{true, false, false, false, true} {
		d.recordCall(c, false, fail)
		if got := state(); got != touba.CircuitClosed {
			t.Fatalf("call %d in the new window: %s, want closed (old failures no longer count)", i, got)
		}
	}
	d.recordCall(c, false, true) // 3 failures of 6: the ratio reached
	if got := state(); got != touba.CircuitOpen {
		t.Fatalf("3 failures of 6 calls: %s, want open", got)
	}
	if got := c.state.Until; !got.Equal(now.Add(time.Minute)) {
		t.Fatalf("open until %s, want open_ms after now", got)
	}
	// Calls ending while open (they started before) change nothing.
	d.recordCall(c, false, false)
	if got := state(); got != touba.CircuitOpen {
		t.Fatalf("a late success while open: %s", got)
	}
	// A reload that drops the circuit holds nothing.
	if d.circuits.of(&Binding{Ref: "tool:w"}) != nil {
		t.Fatal("a binding without circuit has one")
	}
}
