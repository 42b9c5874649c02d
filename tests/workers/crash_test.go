package workers_test

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/internal/testkit"
)

// TestCrashPointsAtHandOut: a worker binding's call is prepared and
// dispatched in one commit when a take hands it out, and the crash points
// after prepared and after dispatched still fire, in that order, after
// that commit and before the take answers. A daemon killed there leaves
// the effect dispatched (both audit events on record) and no call at the
// worker: after a restart it is unknown, handed out again under
// idempotency_key and parked, never sent, under none. Killed after the
// outcome, the run prepares again at the next hand-out, finds the effect
// applied, and ends without handing the call out a second time.
func TestCrashPointsAtHandOut(t *testing.T) { eachBackend(t, tCrashPointsAtHandOut) }

func tCrashPointsAtHandOut(t *testing.T, backend string) {
	for _, tc := range []struct {
		point, mode string
		// calls at the worker before the crash and in all; the entry's
		// end and its error code.
		before, after int
		status, code  string
	}{
		{dispatcher.CrashAfterPrepared, touba.RetryIdempotencyKey, 0, 1, touba.StatusDone, ""},
		{dispatcher.CrashAfterPrepared, touba.RetryNone, 0, 0, touba.StatusParked, touba.EEffectOutcomeUnknown},
		{dispatcher.CrashAfterDispatched, touba.RetryIdempotencyKey, 0, 1, touba.StatusDone, ""},
		{dispatcher.CrashAfterDispatched, touba.RetryNone, 0, 0, touba.StatusParked, touba.EEffectOutcomeUnknown},
		{dispatcher.CrashAfterOutcome, touba.RetryNone, 1, 1, touba.StatusDone, ""},
	} {
		t.Run(tc.point+"/"+tc.mode, func(t *testing.T) {
			w := newWorld(t, backend, tc.mode, 10000)
			w.env = []string{crashpoint.Env + "=" + tc.point}
			w.start("--workers", "2")
			remote := filepath.Join(w.dir, "remote.jsonl")
			startWorker(t, w, remote, "", 4)
			w.send(orders, "evt-1")
			if code := w.d.Wait(30 * time.Second); code != -1 {
				t.Fatalf("daemon exited %d, want killed at %s\n%s", code, tc.point, w.d.Log())
			}
			if got := len(readRemote(t, remote)); got != tc.before {
				t.Fatalf("%d calls at the worker when the daemon died, want %d", got, tc.before)
			}
			effects, events := w.effects()
			if len(effects) != 1 {
				t.Fatalf("effects at the crash: %+v, want one", effects)
			}
			var states []string
			for _, ev := range events[effects[0].EffectID] {
				states = append(states, ev.State)
			}
			want := []string{touba.EffectPrepared, touba.EffectDispatched}
			if tc.point == dispatcher.CrashAfterOutcome {
				want = append(want, touba.EffectApplied)
			}
			if !slices.Equal(states, want) {
				t.Fatalf("journal events at the crash %v, want %v", states, want)
			}
			w.env = nil
			w.start("--workers", "2")
			w.waitStatus(tc.status, orders, 1, 30*time.Second)
			// A call handed out again reaches the worker before its run
			// ends; none may come after.
			testkit.WaitFor(t, 10*time.Second, func() bool { return len(readRemote(t, remote)) >= tc.after }, "the worker's calls")
			w.stop()
			if got := len(readRemote(t, remote)); got != tc.after {
				t.Fatalf("%d calls at the worker in all, want %d", got, tc.after)
			}
			if tc.code != "" {
				if code := w.entryError(w.ids["evt-1"]); code != tc.code {
					t.Fatalf("entry ended with %s, want %s", code, tc.code)
				}
			}
		})
	}
}
