package crash_test

import (
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dispatcher"
)

// TestRepeatedCrashes crashes one entry's run again and again, each
// restart armed with the next crash point, with retry mode
// idempotency_key: each restart must recover what the previous crash left,
// and after five crashes the remote has still written each effect once.
func TestRepeatedCrashes(t *testing.T) {
	t.Parallel()
	w := newWorld(t, touba.RetryIdempotencyKey, oneShotKind)
	w.intake(deliveries)
	first := firstQueueID(w)
	wid, cid := effectID(first, stepWrite), effectID(first, stepConfirm)

	// Each step is a crash point and what the first entry's write effect
	// (state, attempts) and the remote's request count are right after it.
	steps := []struct {
		point    string
		state    string
		attempts int
		requests int
	}{
		{dispatcher.CrashAfterPrepared, touba.EffectPrepared, 1, 0},
		{dispatcher.CrashAfterDispatched, touba.EffectDispatched, 2, 0}, // prepared again: nothing was sent
		{dispatcher.CrashAfterAnswer, touba.EffectDispatched, 3, 1},     // unknown, sent again with its key
		{dispatcher.CrashAfterOutcome, touba.EffectApplied, 4, 2},       // the remote answers the duplicate
		{dispatcher.CrashAfterCheckpoint, touba.EffectApplied, 4, 3},    // read from the journal; confirm runs
	}
	for i, s := range steps {
		var extra []string
		if i > 0 {
			extra = []string{"--take-over-stale-lock"}
		}
		log := w.crash(s.point, 1, extra...)
		effects, _ := w.effects()
		e := effects[wid]
		if e.State != s.state || e.Attempts != s.attempts {
			t.Fatalf("after crash %d at %s: %s is %s attempts=%d, want %s attempts=%d\n%s",
				i+1, s.point, wid, e.State, e.Attempts, s.state, s.attempts, log)
		}
		if got := len(w.remoteLines()); got != s.requests {
			t.Fatalf("after crash %d at %s: the remote saw %d requests, want %d: %v", i+1, s.point, got, s.requests, w.remoteLines())
		}
	}
	if effects, _ := w.effects(); effects[cid].State != touba.EffectApplied {
		t.Fatalf("after the last crash: %s is %q, want applied", cid, effects[cid].State)
	}

	w.settle(w.restart(2))
	w.check(map[string]end{first: doneAfter(2, 4)})
}
