package crash_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/internal/testkit"
)

// TestCrashPointsBusy is TestCrashPoints with four workers: when the first
// run reaches the crash point, the others are anywhere in their own runs,
// some with a handler mid-call. What each entry must end as is derived
// from what the files held at the crash (see endFrom), so the invariants
// are checked for every interleaving the scheduler happens to produce.
func TestCrashPointsBusy(t *testing.T) {
	points := []string{dispatcher.CrashAfterPrepared, dispatcher.CrashAfterDispatched, dispatcher.CrashAfterAnswer,
		dispatcher.CrashAfterOutcome, dispatcher.CrashAfterCheckpoint}
	for _, point := range points {
		for _, mode := range retryModes {
			for _, kind := range handlerKinds {
				t.Run(point+"/"+mode+"/"+kind, func(t *testing.T) {
					t.Parallel()
					w := newWorld(t, mode, kind)
					w.intake(deliveries)
					log := w.crash(point, 4)
					// A handler that had its request when the daemon died
					// still runs, and may still write at the remote.
					waitHandlersGone(t, w.remote)

					want := w.endsFromCrash(point, log)
					w.settle(w.restart(4))
					w.check(want)
				})
			}
		}
	}
}

// endsFromCrash reads the files the crash left, checks that they show the
// crash point's mark, and derives each entry's end after a restart.
func (w *world) endsFromCrash(point, log string) map[string]end {
	t := w.t
	t.Helper()
	effects, _ := w.effects()
	byEffect := map[string]int{}
	for _, l := range w.remoteLines() {
		byEffect[l.EffectID]++
	}
	entries := w.entries()
	// Every run passes every crash point before its entry is done, so none
	// can be done yet.
	for qid, e := range entries {
		if e.Status != touba.StatusPending && e.Status != touba.StatusRunning {
			t.Fatalf("at the crash, entry %s (%s) is %s, want pending or running", qid, e.EventID, e.Status)
		}
	}
	marked := false
	want := map[string]end{}
	for qid, e := range entries {
		var st [2]touba.Effect
		var ok [2]bool
		for i, step := range stepIDs {
			st[i], ok[i] = effects[effectID(qid, step)]
		}
		switch point {
		case dispatcher.CrashAfterPrepared:
			marked = marked || ok[0] && st[0].State == touba.EffectPrepared
		case dispatcher.CrashAfterDispatched:
			marked = marked || ok[0] && st[0].State == touba.EffectDispatched && byEffect[st[0].EffectID] == 0
		case dispatcher.CrashAfterAnswer:
			marked = marked || ok[0] && st[0].State == touba.EffectDispatched && byEffect[st[0].EffectID] == 1
		case dispatcher.CrashAfterOutcome:
			marked = marked || ok[0] && st[0].State == touba.EffectApplied
		case dispatcher.CrashAfterCheckpoint:
			marked = marked || e.Status == touba.StatusRunning && ok[1] && st[1].State == touba.EffectApplied
		}
		want[qid] = w.endFrom(st, ok, byEffect)
	}
	for qid, x := range want {
		if x != plain {
			t.Logf("at the crash, %s (%s) was %s; it must end %+v", qid, entries[qid].EventID, entries[qid].Status, x)
		}
	}
	if !marked {
		t.Fatalf("the files show no entry at %s\n%s", point, log)
	}
	return want
}

// endFrom is SPEC §5's table applied to the effects of one entry as the
// crash left them (ok[i] false for none) and the remote's request counts.
func (w *world) endFrom(st [2]touba.Effect, ok [2]bool, requests map[string]int) end {
	x := end{status: touba.StatusDone}
	for i := range stepIDs {
		if x.status == touba.StatusParked {
			break // the run stops at the parked effect
		}
		if !ok[i] {
			x.steps[i] = once
			continue
		}
		r := requests[st[i].EffectID]
		switch st[i].State {
		case touba.EffectPrepared:
			// Never sent: a new attempt.
			x.steps[i] = stepEnd{touba.EffectApplied, st[i].Attempts + 1, 1}
		case touba.EffectDispatched:
			// Unknown after recovery: sent again only with a key.
			if w.retryMode == touba.RetryIdempotencyKey {
				x.steps[i] = stepEnd{touba.EffectApplied, st[i].Attempts + 1, r + 1}
			} else {
				x.steps[i], x.status = stepEnd{touba.EffectUnknown, st[i].Attempts, r}, touba.StatusParked
			}
		case touba.EffectApplied:
			// Read from the journal, never sent again.
			x.steps[i] = stepEnd{touba.EffectApplied, st[i].Attempts, r}
		default:
			w.t.Fatalf("at the crash, effect %s is %s: no call of this test ends so", st[i].EffectID, st[i].State)
		}
	}
	return x
}

// waitHandlersGone waits until no process runs the remote handler on this
// test's remote file (an orphan of the killed daemon finishing its call).
func waitHandlersGone(tb testing.TB, remote string) {
	tb.Helper()
	arg := append([]byte(remote), 0)
	testkit.WaitFor(tb, 30*time.Second, func() bool {
		cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range cmdlines {
			b, err := os.ReadFile(p)
			if err == nil && bytes.Contains(b, arg) {
				return false
			}
		}
		return true
	}, "orphaned handlers to exit")
}
