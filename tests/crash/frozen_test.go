package crash_test

import (
	"os"
	"strings"
	"syscall"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// TestFrozenNodeLateAnswer (SPEC §8): node A's handler call is in flight
// (the remote recorded the write and holds its answer) when A is frozen
// with SIGSTOP: alive, but cut off. Past A's lease, node B takes the entry
// over (the effect unknown, naming A) and applies §5's table: a retry into
// the remote's deduplication with an idempotency key, parked otherwise.
// Then the remote answers and A is resumed with SIGCONT: A's late answer
// changes nothing (an effect.late_outcome event only), A starts no new
// call, B's view stands, and nothing is written twice.
//
// When A resumes, its call's deadline (pgTimeoutMS, under the lease) has
// passed too, so A reports either the remote's answer (applied) or its
// own timeout (unknown), whichever its runtime sees first: both are late
// reports and must change nothing; the log says which one this run saw.
func TestFrozenNodeLateAnswer(t *testing.T) {
	if ok, why := pgtest.Available(); !ok {
		t.Skip("PostgreSQL 15 not installed: " + why)
	}
	for _, mode := range retryModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			w := newPGWorld(t, mode, oneShotKind)
			hold := w.remote + ".hold"
			if err := os.WriteFile(hold, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(hold) })

			a := testkit.Start(t, nil, w.args("--workers", "1", "--node-id", crashed)...)
			w.send(a, 1)
			qid := w.acked[w.order[0]]
			write, confirm := effectID(qid, stepWrite), effectID(qid, stepConfirm)
			testkit.WaitFor(t, pgWait, func() bool { return len(w.remoteLines()) == 1 }, "node A's call to reach the remote")
			a.Signal(syscall.SIGSTOP)
			t.Cleanup(func() { a.Cmd.Process.Signal(syscall.SIGCONT) })

			b := testkit.Start(t, nil, w.args("--workers", "1", "--node-id", survivor)...)
			b.WaitLog(`"previous_node":"`+crashed+`"`, pgWait) // the take-over, past A's lease
			// Only now may calls answer: B's retry (idempotency_key) and
			// A's call, whose answer waits in its pipe while A is frozen.
			if err := os.Remove(hold); err != nil {
				t.Fatal(err)
			}
			want := touba.StatusParked
			if mode == touba.RetryIdempotencyKey {
				want = touba.StatusDone
			}
			testkit.WaitFor(t, pgWait, func() bool { return w.entries()[qid].Status == want }, "node B to end the entry "+want)

			a.Signal(syscall.SIGCONT)
			var late touba.EffectEvent
			testkit.WaitFor(t, pgWait, func() bool {
				_, events := w.effects()
				for _, e := range events[write] {
					if e.State == "late_outcome" {
						late = e
						return true
					}
				}
				return false
			}, "node A's late answer kept as an event")
			if !strings.Contains(late.Detail, "effect.late_outcome: node "+crashed) {
				t.Errorf("late outcome event %q does not name node %s", late.Detail, crashed)
			}
			t.Logf("late outcome: %s", late.Detail)
			stop(t, a)
			stop(t, b)

			e := w.entries()[qid]
			effects, events := w.effects()
			lines := w.remoteLines()
			var writes, requests, confirms int
			for _, l := range lines {
				switch l.EffectID {
				case write:
					requests++
					if l.Kind == "write" {
						writes++
					}
				case confirm:
					confirms++
				}
			}
			if writes != 1 {
				t.Errorf("%s written %d times at the remote, want once: %v", write, writes, lines)
			}
			eff := effects[write]
			if mode == touba.RetryIdempotencyKey {
				// B's retry reached the deduplicating remote and went on.
				if e.Status != touba.StatusDone || eff.State != touba.EffectApplied || requests != 2 || confirms != 1 {
					t.Errorf("entry %s, %s %s after %d requests, confirm called %d times; want done, applied after 2, confirm once",
						e.Status, write, eff.State, requests, confirms)
				}
			} else if e.Status != touba.StatusParked || e.ErrorCode != parkCode(mode) || eff.State != touba.EffectUnknown ||
				requests != 1 || confirms != 0 {
				// B's view: parked for an operator; A's answer (applied)
				// did not make it applied, and nobody called again.
				t.Errorf("entry %s (%s), %s %s after %d requests, confirm called %d times; want parked (%s), unknown after 1, confirm never",
					e.Status, e.ErrorCode, write, eff.State, requests, confirms, parkCode(mode))
			}
			// The take-over's unknown names A; after the late answer no
			// state changed.
			var sawTakeOver bool
			for i, ev := range events[write] {
				if ev.State == touba.EffectUnknown && strings.Contains(ev.Detail, "the lease of node "+crashed+" expired") {
					sawTakeOver = true
				}
				if ev.State == "late_outcome" {
					for _, after := range events[write][i+1:] {
						if after.State != "late_outcome" {
							t.Errorf("state event after the late outcome: %+v", after)
						}
					}
				}
			}
			if !sawTakeOver {
				t.Errorf("no unknown event naming node %s in %+v", crashed, events[write])
			}
		})
	}
}
