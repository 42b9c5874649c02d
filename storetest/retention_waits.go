package storetest

import (
	"slices"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// --retention and durable steps (issue 42): a done delivery a wait may
// still read keeps its body and headers past the cutoff, by the rule
// --history keeps it by (SPEC §2.3, §8.1): matched by the wait of an
// unfinished entry (the output is read from the delivery when the waiting
// entry runs again, which a paused trigger or a stopped daemon may put off
// for a week), or holding an unconsumed offer for a trigger with
// unfinished entries.

// purge runs PurgeBodies with a cutoff a day before the clock and checks
// how many bodies it dropped.
func (e *env) purge(t *testing.T, want int64, why string) {
	t.Helper()
	if n, err := e.Queue.PurgeBodies(e.ctx, e.clock.Now().Add(-24*time.Hour)); err != nil || n != want {
		t.Fatalf("purged %d (%v), want %d: %s", n, err, want, why)
	}
}

// wantBody checks that queueID still has its body and headers.
func (e *env) wantBody(t *testing.T, queueID, why string) {
	t.Helper()
	got := e.get(t, queueID)
	if len(got.Body) == 0 || len(got.Headers) == 0 {
		t.Fatalf("entry %s (%s): body %q headers %v; want both kept: %s", queueID, got.Status, got.Body, got.Headers, why)
	}
}

// testPurgeKeepsMatched: a delivery that matched an open wait, done long
// ago, keeps its body while the waiting entry has not finished: held
// (running again, failed, replayed) it has not read the match yet.
func testPurgeKeepsMatched(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	w := e.waiter(t, "w", "")
	if got := e.begin(t, ws, eventWait(w, "await", keyA, `1`, nil)); got.State != touba.WaitOpen {
		t.Fatalf("begun wait: %+v, want open", got)
	}
	m := e.offering(t, "m", `1`, keyA)
	if !slices.Equal(m.Matched, []string{w}) {
		t.Fatalf("offer matched %v, want [%s]", m.Matched, w)
	}
	plain := e.putOf(t, "trigger:b", "plain", nil).QueueID
	e.lease(t, 10, w, m.QueueID, plain)
	e.finish(t, m.QueueID, touba.StatusDone)
	e.finish(t, plain, touba.StatusDone)
	e.clock.Add(7 * 24 * time.Hour)

	// The waiter is running (its run stopped before it read the match).
	e.purge(t, 1, "the plain delivery, not the one an unfinished wait matched")
	e.wantBody(t, m.QueueID, "matched by the wait of a running entry")
	// Failed, it may be replayed or resumed: the wait is read again.
	if err := e.Queue.Finish(e.ctx, w, e.tok(w), touba.StatusFailed, touba.EINTERNAL, "crashed"); err != nil {
		t.Fatal(err)
	}
	e.purge(t, 0, "the waiter failed, an operator may replay it")
	e.wantBody(t, m.QueueID, "matched by the wait of a failed entry")
	if res, err := e.Queue.Replay(e.ctx, []string{w}, touba.ReplayOptions{}); err != nil || len(res) != 1 || res[0].To != touba.StatusPending {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	e.clock.Add(7 * 24 * time.Hour)
	e.purge(t, 0, "the waiter is pending")
	e.lease(t, 10, w)
	if got := e.begin(t, ws, eventWait(w, "await", keyA, `1`, nil)); got.State != touba.WaitMatched || got.MatchedQueueID != m.QueueID {
		t.Fatalf("re-run's wait: %+v, want matched by %s", got, m.QueueID)
	}
	e.wantBody(t, m.QueueID, "read by the re-run")
	e.finish(t, w, touba.StatusDone)
	e.purge(t, 1, "the matched delivery once its waiter is done")
	if got := e.get(t, m.QueueID); got.Body != nil {
		t.Fatalf("matched delivery after its waiter is done: body %q, want purged", got.Body)
	}
}

// testPurgeKeepsOffered: a delivery accepted before the wait began keeps
// its body while its offer is unconsumed and an entry of the awaiting
// trigger is unfinished, and then while the wait that took it has not
// finished (the run stopped between the match and its checkpoint).
func testPurgeKeepsOffered(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	w := e.waiter(t, "w", "")
	m := e.offering(t, "early", `1`, keyA).QueueID
	e.lease(t, 1, m)
	e.finish(t, m, touba.StatusDone)
	e.clock.Add(7 * 24 * time.Hour)
	e.purge(t, 0, "an unfinished entry of trigger:a may take the offer")
	e.wantBody(t, m, "an unconsumed offer awaited by an unfinished entry")

	if got := e.begin(t, ws, eventWait(w, "await", keyA, `1`, nil)); got.State != touba.WaitMatched || got.MatchedQueueID != m {
		t.Fatalf("wait: %+v, want matched by %s", got, m)
	}
	e.clock.Add(7 * 24 * time.Hour)
	e.purge(t, 0, "the offer is consumed by a wait whose entry has not finished")
	e.wantBody(t, m, "taken by the wait of an unfinished entry")
	e.finish(t, w, touba.StatusDone)
	e.purge(t, 1, "the offering delivery once its waiter is done")
}

// testPurgeLeavesNil: a purged body reads as nil, a body that was empty
// as empty, so that a reader can tell them apart.
func testPurgeLeavesNil(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	old, empty := e.put(t, "old", "1"), e.put(t, "empty", "")
	e.lease(t, 2, old, empty)
	e.finish(t, old, touba.StatusDone)
	e.finish(t, empty, touba.StatusDone)
	if got := e.get(t, empty); got.Body == nil {
		t.Fatalf("an empty body reads as nil before any purge")
	}
	e.clock.Add(48 * time.Hour)
	e.purge(t, 2, "both done long ago")
	if got := e.get(t, old); got.Body != nil {
		t.Fatalf("purged body reads as %q, want nil", got.Body)
	}
	recent := e.put(t, "recent", "")
	e.lease(t, 1, recent)
	e.finish(t, recent, touba.StatusDone)
	if got := e.get(t, recent); got.Body == nil || len(got.Body) != 0 {
		t.Fatalf("empty body of a done entry reads as %#v, want empty and not nil", got.Body)
	}
}
