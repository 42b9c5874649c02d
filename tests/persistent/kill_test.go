package persistent_test

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// TestHandlerKilledWithCallsInFlight SIGKILLs the one persistent handler
// process while it holds four calls, the daemon running on. Each of the
// four effects ends unknown with HandlerFailed (SPEC §4.1): under
// idempotency_key it is sent again, to a fresh process, and applied; under
// reconcile and none its entry is parked. A later delivery is served by a
// fresh process.
func TestHandlerKilledWithCallsInFlight(t *testing.T) {
	for _, mode := range []string{touba.RetryIdempotencyKey, touba.RetryReconcile, touba.RetryNone} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			const held = 4
			w := newWorld(t, mode, 1000)
			hold := w.remote + ".hold"
			if err := os.WriteFile(hold, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(hold) })
			d := w.start(held)
			var first []string
			for i := range held {
				first = append(first, fmt.Sprintf("evt-%d", i+1))
			}
			w.send(d, first...)
			testkit.WaitFor(t, 30*time.Second, func() bool { return len(w.remoteLines()) >= held }, "four calls held by the handler")
			lines := w.remoteLines()
			pid := lines[0].PID
			for _, l := range lines {
				if l.PID != pid || l.Mode != "persistent" {
					t.Fatalf("held calls %+v, want all on one persistent process", lines)
				}
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(hold); err != nil {
				t.Fatal(err)
			}
			testkit.WaitFor(t, 30*time.Second, func() bool { return finished(d.Log()) >= held }, "the four runs finished")
			w.send(d, "evt-late")
			testkit.WaitFor(t, 30*time.Second, func() bool { return finished(d.Log()) >= held+1 }, "the late run finished")
			stop(t, d)

			effects, entries := w.effects(), w.entries()
			byEffect := map[string][]remoteLine{}
			for _, l := range w.remoteLines() {
				byEffect[l.EffectID] = append(byEffect[l.EffectID], l)
			}
			for _, id := range first {
				qid := w.acked[id]
				e, reqs := effects[qid+":write"], byEffect[qid+":write"]
				got := entries[qid]
				if mode == touba.RetryIdempotencyKey {
					if e.State != touba.EffectApplied || e.Attempts != 2 || got.Status != touba.StatusDone {
						t.Fatalf("%s: journal %+v, entry %s, want applied at attempt 2, done", id, e, got.Status)
					}
					if len(reqs) != 2 || reqs[1].PID == pid || reqs[1].Attempt != 2 {
						t.Fatalf("%s: the remote saw %+v, want a second attempt on a fresh process", id, reqs)
					}
					continue
				}
				wantCode := touba.EEffectReconciliationRequired
				if mode == touba.RetryNone {
					wantCode = touba.EEffectOutcomeUnknown
				}
				if e.State != touba.EffectUnknown || e.ErrorCode != touba.EHandlerFailed || got.Status != touba.StatusParked ||
					got.ErrorCode != wantCode {
					t.Fatalf("%s: journal %+v, entry %s %s; want unknown (HandlerFailed), parked %s",
						id, e, got.Status, got.ErrorCode, wantCode)
				}
				if len(reqs) != 1 {
					t.Fatalf("%s: the remote saw %d requests, want 1 (never sent again)", id, len(reqs))
				}
			}
			late := w.acked["evt-late"]
			reqs := byEffect[late+":write"]
			if entries[late].Status != touba.StatusDone || len(reqs) != 1 || reqs[0].PID == pid {
				t.Fatalf("late delivery: entry %s, remote %+v; want done on a fresh process", entries[late].Status, reqs)
			}
		})
	}
}

// TestMaxCallsAcrossDeliveries runs deliveries through a binding with
// max_calls 5: every one is applied once, no process serves more than 5
// calls, and processes are replaced as they retire.
func TestMaxCallsAcrossDeliveries(t *testing.T) {
	const n, maxCalls = 30, 5
	w := newWorld(t, touba.RetryIdempotencyKey, maxCalls)
	d := w.start(8)
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("evt-%d", i))
	}
	w.send(d, ids...)
	testkit.WaitFor(t, 60*time.Second, func() bool { return finished(d.Log()) >= n }, "every run finished")
	stop(t, d)

	perPID, perEffect := map[int]int{}, map[string]int{}
	for _, l := range w.remoteLines() {
		perPID[l.PID]++
		perEffect[l.EffectID]++
	}
	for pid, calls := range perPID {
		if calls > maxCalls {
			t.Fatalf("process %d served %d calls, max_calls is %d", pid, calls, maxCalls)
		}
	}
	if got, want := len(perPID), n/maxCalls; got < want {
		t.Fatalf("%d processes served %d calls, want at least %d", got, n, want)
	}
	entries := w.entries()
	for _, id := range ids {
		qid := w.acked[id]
		if got, want := perEffect[qid+":write"], 1; got != want {
			t.Fatalf("%s reached the remote %d times, want %d", id, got, want)
		}
		if got, want := entries[qid].Status, touba.StatusDone; got != want {
			t.Fatalf("%s: entry %s, want %s", id, got, want)
		}
	}
}
