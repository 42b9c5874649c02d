package storetest

import (
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// The entry states (SPEC §3.2) as the dispatcher and the operators move
// them: lease, the three endings, retry and postpone, the start-up requeue
// and the operator's replay.
func runLease(t *testing.T, f Factory) {
	t.Run("OldestFirstAndBounded", func(t *testing.T) { testLeaseOrder(t, f) })
	t.Run("DueTimeRespected", func(t *testing.T) { testLeaseDue(t, f) })
	t.Run("Finish", func(t *testing.T) { testFinish(t, f) })
	t.Run("GuardsOnlyRunning", func(t *testing.T) { testGuards(t, f) })
	t.Run("RetrySpendsAnAttemptPostponeDoesNot", func(t *testing.T) { testAttempts(t, f) })
	t.Run("RequeueRunning", func(t *testing.T) { testRequeueRunning(t, f) })
	t.Run("RequeueAfterRestart", func(t *testing.T) { testRequeueAfterRestart(t, f) })
	t.Run("Replay", func(t *testing.T) { testReplay(t, f) })
	t.Run("FirstLeaseOnlyOnce", func(t *testing.T) { testFirstLease(t, f) })
}

// lease leases up to n entries and checks that they are want, in order.
func (e *env) lease(t *testing.T, n int, want ...string) []*touba.Delivery {
	t.Helper()
	got, err := e.Queue.Lease(e.ctx, n)
	if err != nil {
		t.Fatalf("lease %d: %v", n, err)
	}
	ids := make([]string, len(got))
	for i, d := range got {
		ids[i] = d.QueueID
		if d.Status != touba.StatusRunning {
			t.Fatalf("leased %s in status %s, want running", d.QueueID, d.Status)
		}
	}
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Fatalf("leased %v, want %v", ids, want)
	}
	return got
}

// finish ends a running entry in status.
func (e *env) finish(t *testing.T, queueID, status string) {
	t.Helper()
	if err := e.Queue.Finish(e.ctx, queueID, e.tok(queueID), status, "", ""); err != nil {
		t.Fatalf("finish %s as %s: %v", queueID, status, err)
	}
}

// tok is the fencing token queueID is leased under now (0 for none), as
// the holder of its lease knows it.
func (e *env) tok(queueID string) int64 {
	if d, err := e.Queue.Get(e.ctx, queueID); err == nil && d != nil {
		return d.LeaseToken
	}
	return 0
}

func (e *env) wantPending(t *testing.T, want int64) {
	t.Helper()
	if got := e.Queue.Pending(); got != want {
		t.Fatalf("pending=%d, want %d", got, want)
	}
}

func testLeaseOrder(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	a, b, c := e.put(t, "a", "1"), e.put(t, "b", "2"), e.put(t, "c", "3")
	got := e.lease(t, 2, a, b)
	for _, d := range got {
		if d.Attempts != 1 || string(d.Body) == "" || d.TriggerRef != "trigger:t" {
			t.Fatalf("leased %+v, want attempt 1 with its delivery", d)
		}
	}
	e.wantPending(t, 1)
	if got := e.get(t, a); got.Status != touba.StatusRunning || got.Attempts != 1 {
		t.Fatalf("stored after lease: %+v", got)
	}
	e.lease(t, 10, c)
	e.lease(t, 10)
	e.wantPending(t, 0)
}

func testLeaseDue(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	a := e.put(t, "a", "1")
	e.lease(t, 1, a)
	due := e.clock.Now().Add(time.Hour)
	if err := e.Queue.Retry(e.ctx, a, e.tok(a), due, touba.EHandlerFailed, "boom"); err != nil {
		t.Fatal(err)
	}
	e.wantPending(t, 1)
	got := e.get(t, a)
	if got.Status != touba.StatusPending || got.ErrorCode != touba.EHandlerFailed {
		t.Fatalf("after retry: %+v", got)
	}
	d, err := e.Queue.Detail(e.ctx, a)
	if err != nil || d == nil || d.NotBefore == nil || !d.NotBefore.Equal(due) || d.ErrorMessage != "boom" {
		t.Fatalf("detail while the retry waits: %+v, %v; want not before %v, message boom", d, err, due)
	}
	// Not due yet: nothing to lease; a later entry that is due goes first.
	b := e.put(t, "b", "2")
	e.lease(t, 10, b)
	e.clock.Add(time.Hour - time.Millisecond)
	e.lease(t, 10)
	e.clock.Add(time.Millisecond)
	if got := e.lease(t, 10, a); got[0].Attempts != 2 {
		t.Fatalf("attempts=%d on the second lease, want 2", got[0].Attempts)
	}
}

func testFinish(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ids := map[string]string{}
	for _, st := range []string{touba.StatusDone, touba.StatusFailed, touba.StatusParked} {
		ids[st] = e.put(t, st, st)
		e.lease(t, 1, ids[st])
		e.clock.Add(time.Second)
		if err := e.Queue.Finish(e.ctx, ids[st], e.tok(ids[st]), st, "Code"+st, "message "+st); err != nil {
			t.Fatalf("finish %s: %v", st, err)
		}
		got := e.get(t, ids[st])
		if got.Status != st || got.ErrorCode != "Code"+st || !got.UpdatedAt.Equal(e.clock.Now()) {
			t.Fatalf("finished %s: %+v", st, got)
		}
		d, err := e.Queue.Detail(e.ctx, ids[st])
		if err != nil || d.ErrorMessage != "message "+st || d.NotBefore != nil {
			t.Fatalf("detail of %s: %+v, %v", st, d, err)
		}
	}
	e.wantPending(t, 0)
	// An ending without a code stores none.
	id := e.put(t, "plain", "x")
	e.lease(t, 1, id)
	e.finish(t, id, touba.StatusDone)
	if got := e.get(t, id); got.ErrorCode != "" {
		t.Fatalf("error code %q, want none", got.ErrorCode)
	}
}

// testGuards: Finish, Retry and Postpone change only a running entry; a
// refused change changes nothing, not even the pending count.
func testGuards(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	done := e.put(t, "done", "2")
	e.lease(t, 1, done)
	e.finish(t, done, touba.StatusDone)
	pending := e.put(t, "pending", "1")
	soon := e.clock.Now().Add(time.Minute)
	for _, id := range []string{pending, done, "no-such-entry"} {
		for name, err := range map[string]error{
			"finish":   e.Queue.Finish(e.ctx, id, e.tok(id), touba.StatusFailed, "X", "x"),
			"retry":    e.Queue.Retry(e.ctx, id, e.tok(id), soon, "X", "x"),
			"postpone": e.Queue.Postpone(e.ctx, id, e.tok(id), soon, "X", "x"),
		} {
			if err == nil {
				t.Errorf("%s of %s: accepted, want refused (not running)", name, id)
			}
		}
	}
	if got := e.get(t, pending); got.Status != touba.StatusPending || got.ErrorCode != "" {
		t.Fatalf("pending entry changed by refused calls: %+v", got)
	}
	if got := e.get(t, done); got.Status != touba.StatusDone || got.ErrorCode != "" {
		t.Fatalf("done entry changed by refused calls: %+v", got)
	}
	e.wantPending(t, 1)
	// Finish takes only an ending.
	e.lease(t, 1, pending)
	if err := e.Queue.Finish(e.ctx, pending, e.tok(pending), touba.StatusPending, "", ""); err == nil {
		t.Fatal("finish as pending accepted")
	}
	if got := e.get(t, pending); got.Status != touba.StatusRunning {
		t.Fatalf("status %s after a refused finish, want running", got.Status)
	}
}

func testAttempts(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	a := e.put(t, "a", "1")
	now := e.clock.Now()
	e.lease(t, 1, a)
	if err := e.Queue.Postpone(e.ctx, a, e.tok(a), now, touba.EEffectInProgress, "held"); err != nil {
		t.Fatal(err)
	}
	e.wantPending(t, 1)
	if got := e.lease(t, 1, a); got[0].Attempts != 1 {
		t.Fatalf("attempts=%d after a postpone, want 1 again", got[0].Attempts)
	}
	if err := e.Queue.Retry(e.ctx, a, e.tok(a), now, touba.EHandlerFailed, "boom"); err != nil {
		t.Fatal(err)
	}
	if got := e.lease(t, 1, a); got[0].Attempts != 2 {
		t.Fatalf("attempts=%d after a retry, want 2", got[0].Attempts)
	}
	if err := e.Queue.Postpone(e.ctx, a, e.tok(a), now, "", ""); err != nil {
		t.Fatal(err)
	}
	if got := e.get(t, a); got.Attempts != 1 {
		t.Fatalf("stored attempts=%d while postponed, want 1 (the retry's)", got.Attempts)
	}
}

func testRequeueRunning(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	a, b, c := e.put(t, "a", "1"), e.put(t, "b", "2"), e.put(t, "c", "3")
	e.lease(t, 2, a, b)
	if err := e.Queue.Retry(e.ctx, b, e.tok(b), e.clock.Now().Add(time.Hour), "X", "x"); err != nil {
		t.Fatal(err)
	}
	e.lease(t, 1, c) // b waits for its retry, a and c run
	n, err := e.Queue.RequeueRunning(e.ctx)
	if err != nil || n != 2 {
		t.Fatalf("requeue: %d, %v; want 2", n, err)
	}
	e.wantPending(t, 3)
	for _, id := range []string{a, c} {
		if got := e.get(t, id); got.Status != touba.StatusPending {
			t.Fatalf("%s: status %s after requeue, want pending", id, got.Status)
		}
		if d, _ := e.Queue.Detail(e.ctx, id); d == nil || d.NotBefore != nil {
			t.Fatalf("%s: detail %+v, want due now", id, d)
		}
	}
	e.lease(t, 10, a, c)
	if n, err := e.Queue.RequeueRunning(e.ctx); err != nil || n != 2 {
		t.Fatalf("second requeue: %d, %v; want 2", n, err)
	}
}

// testRequeueAfterRestart: entries left running by a stopped daemon are
// still running when it starts again, until RequeueRunning.
func testRequeueAfterRestart(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	a, b := e.put(t, "a", "1"), e.put(t, "b", "2")
	e.lease(t, 1, a)
	e = e.reopen(t)
	if got := e.get(t, a); got.Status != touba.StatusRunning {
		t.Fatalf("a after restart: %s, want running", got.Status)
	}
	e.wantPending(t, 1)
	if n, err := e.Queue.RequeueRunning(e.ctx); err != nil || n != 1 {
		t.Fatalf("requeue: %d, %v; want 1", n, err)
	}
	e.wantPending(t, 2)
	if got := e.lease(t, 10, a, b); got[0].Attempts != 2 {
		t.Fatalf("attempts=%d after the interrupted run, want 2", got[0].Attempts)
	}
}

// testReplay: an operator's replay puts failed and parked entries back to
// pending with the same queue id and fresh attempts; any other entry is
// reported and left alone.
func testReplay(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	failed, parked := e.put(t, "failed", "1"), e.put(t, "parked", "2")
	done, running := e.put(t, "done", "3"), e.put(t, "running", "4")
	pending := e.put(t, "pending", "5")
	e.lease(t, 4, failed, parked, done, running)
	e.finish(t, failed, touba.StatusFailed)
	e.finish(t, parked, touba.StatusParked)
	e.finish(t, done, touba.StatusDone)
	e.wantPending(t, 1)
	ids := []string{failed, "no-such-entry", parked, done, running, pending}
	res, err := e.Queue.Replay(e.ctx, ids, touba.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(ids) {
		t.Fatalf("%d results for %d ids", len(res), len(ids))
	}
	wantFrom := []string{touba.StatusFailed, "", touba.StatusParked, "", "", ""}
	for i, r := range res {
		if r.QueueID != ids[i] || r.From != wantFrom[i] || (r.From == "") != (r.Reason != "") {
			t.Fatalf("result %d: %+v, want queue id %s from %q, a reason exactly when nothing was done", i, r, ids[i], wantFrom[i])
		}
	}
	for id, want := range map[string]string{failed: touba.StatusPending, parked: touba.StatusPending,
		done: touba.StatusDone, running: touba.StatusRunning, pending: touba.StatusPending} {
		if got := e.get(t, id); got.Status != want {
			t.Fatalf("%s: status %s after replay, want %s", id, got.Status, want)
		}
	}
	e.wantPending(t, 3)
	for _, d := range e.lease(t, 10, failed, parked, pending) {
		if d.Attempts != 1 {
			t.Fatalf("%s: attempts=%d after replay, want 1 (a fresh start)", d.QueueID, d.Attempts)
		}
	}
}

// testFirstLease: Delivery.FirstLease lets the dispatcher skip reading the
// checkpoints of an entry no run has started before. A store may leave it
// false, but never set it on a later lease: a postponed, retried, requeued
// or replayed entry may have checkpoints, and a run that did not read them
// would repeat its steps.
func testFirstLease(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	a, b, c, d := e.put(t, "a", "1"), e.put(t, "b", "2"), e.put(t, "c", "3"), e.put(t, "d", "4")
	now := e.clock.Now()
	first := map[string]bool{}
	for _, got := range e.lease(t, 4, a, b, c, d) {
		first[got.QueueID] = got.FirstLease
	}
	if err := e.Queue.Postpone(e.ctx, a, e.tok(a), now, touba.EEffectInProgress, "held"); err != nil {
		t.Fatal(err)
	}
	if err := e.Queue.Retry(e.ctx, b, e.tok(b), now, touba.EHandlerFailed, "boom"); err != nil {
		t.Fatal(err)
	}
	e.finish(t, c, touba.StatusParked)
	if _, err := e.Queue.Replay(e.ctx, []string{c}, touba.ReplayOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := e.Queue.RequeueRunning(e.ctx); err != nil || n != 1 {
		t.Fatalf("requeue: %d, %v; want 1 (d)", n, err)
	}
	for _, got := range e.lease(t, 4, a, b, c, d) {
		if got.FirstLease {
			t.Fatalf("%s: FirstLease on its second lease (first lease said %v): its checkpoints would go unread",
				got.QueueID, first[got.QueueID])
		}
	}
}
