package dispatcher_test

import (
	"path/filepath"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// TestCloseKillsHandlerPastGrace (SPEC §3.3): a handler still running when
// the shutdown grace ends is killed and its effect journaled unknown; the
// entry goes back to pending, and at the next start the journal's rules
// decide: sent again under an idempotency key, parked otherwise. A none
// contract step simply runs again.
func TestCloseKillsHandlerPastGrace(t *testing.T) {
	for _, c := range []struct {
		write    string
		status   string
		code     string
		calls    int
		attempts int // the effect's, at the end
	}{
		{touba.RetryIdempotencyKey, touba.StatusDone, "", 2, 2},
		{touba.RetryReconcile, touba.StatusParked, touba.EEffectReconciliationRequired, 1, 1},
		{touba.RetryNone, touba.StatusParked, touba.EEffectOutcomeUnknown, 1, 1},
		{"", touba.StatusDone, "", 2, 0},
	} {
		name := c.write
		if name == "" {
			name = "contract none"
		}
		t.Run(name, func(t *testing.T) {
			billCalls := filepath.Join(t.TempDir(), "bill.calls")
			// The first call sleeps far past the grace (and within its own
			// timeout); the next one answers at once.
			in := map[string]any{"mode": "sleep", "sleep_ms": 120_000, "times": 1, "calls": billCalls}
			w := newWorld(t, program(t, 3, step{"bill", toolW, in}),
				manifestOf(t, binding{Tool: toolW, Write: c.write, TimeoutMS: 300_000}), nil, true)
			qid := w.enqueue(trigName, `{}`, nil)
			w.until("the handler to start", func() bool {
				if len(calls(t, billCalls)) == 0 {
					return false
				}
				if c.write == "" {
					return true
				}
				eff := w.effect(qid, "bill")
				return eff != nil && eff.State == touba.EffectDispatched
			})

			began := time.Now()
			w.stop(200 * time.Millisecond)
			if took := time.Since(began); took > waitFor {
				t.Fatalf("Close took %s with a grace of 200ms", took)
			}
			if c.write != "" {
				if eff := w.effect(qid, "bill"); eff.State != touba.EffectUnknown {
					t.Fatalf("effect after the kill: %+v, want unknown", eff)
				}
			}
			if e := w.entry(qid); e.Status != touba.StatusPending {
				t.Fatalf("entry after the kill is %s, want pending", e.Status)
			}

			w.restart()
			e := w.wait(qid, c.status)
			if e.ErrorCode != c.code {
				t.Fatalf("entry ended %s with code %q, want %q", e.Status, e.ErrorCode, c.code)
			}
			cs := calls(t, billCalls)
			if got := len(cs); got != c.calls {
				t.Fatalf("%d calls, want %d", got, c.calls)
			}
			if c.write == "" {
				if eff := w.effect(qid, "bill"); eff != nil {
					t.Fatalf("a none-contract step was journaled: %+v", eff)
				}
				return
			}
			if eff := w.effect(qid, "bill"); eff.Attempts != c.attempts {
				t.Fatalf("effect %+v, want attempt %d", eff, c.attempts)
			}
			if c.calls == 2 && (cs[1].EffectID != cs[0].EffectID || cs[1].Fingerprint != cs[0].Fingerprint || cs[1].EffectAttempt != 2) {
				t.Fatalf("calls %+v: want the same effect sent again at attempt 2", cs)
			}
		})
	}
}

// TestCloseWaitsForHandlerWithinGrace: a handler that finishes within the
// grace is not killed; its entry ends done.
func TestCloseWaitsForHandlerWithinGrace(t *testing.T) {
	billCalls := filepath.Join(t.TempDir(), "bill.calls")
	in := map[string]any{"mode": "sleep", "sleep_ms": 300, "calls": billCalls}
	w := newWorld(t, program(t, 3, step{"bill", toolW, in}),
		manifestOf(t, binding{Tool: toolW, Write: touba.RetryNone}), nil, true)
	qid := w.enqueue(trigName, `{}`, nil)
	w.until("the handler to start", func() bool { return len(calls(t, billCalls)) == 1 })
	w.stop(waitFor)
	wantEntry(t, w.entry(qid), touba.StatusDone, "", 1)
	if eff := w.effect(qid, "bill"); eff.State != touba.EffectApplied || eff.Attempts != 1 {
		t.Fatalf("effect %+v, want applied at attempt 1", eff)
	}
}
