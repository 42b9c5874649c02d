package postgres

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// The PostgreSQL side of durable steps that the backend-independent suite
// (storetest) cannot see: the SQL end to end on one node here; several
// nodes racing in queue_waits_race_test.go; the plans in queue_waits_plan_test.go.

const (
	waiterRef  = "trigger:orders/Placed"
	awaitedRef = "trigger:pay/Succeeded"
)

var waitKey = touba.WaitKey(waiterRef, "paid")

// leaseOne enqueues a delivery and leases it on q.
func leaseOne(t *testing.T, q *Queue, d *touba.Delivery) *touba.Delivery {
	t.Helper()
	if d.Digest == "" {
		d.Digest = "d"
	}
	res, err := q.Enqueue(context.Background(), d)
	if err != nil || !res.Created {
		t.Fatalf("enqueue: %+v, %v", res, err)
	}
	return leaseID(t, q, res.QueueID)
}

// leaseID leases entries on q until it has id; the others (the awaited
// deliveries) end done.
func leaseID(t *testing.T, q *Queue, id string) *touba.Delivery {
	t.Helper()
	ctx := context.Background()
	for {
		got, err := q.Lease(ctx, 1)
		if err != nil || len(got) != 1 {
			t.Fatalf("lease: %v, %v; want %s", got, err, id)
		}
		if got[0].QueueID == id {
			return got[0]
		}
		if err := q.Finish(ctx, got[0].QueueID, got[0].LeaseToken, touba.StatusDone, "", ""); err != nil {
			t.Fatal(err)
		}
	}
}

func mustGet(t *testing.T, q *Queue, id string) *touba.Delivery {
	t.Helper()
	d, err := q.Get(context.Background(), id)
	if err != nil || d == nil {
		t.Fatalf("get %s: %v, %v", id, d, err)
	}
	return d
}

func offer(event, value string) *touba.Delivery {
	return &touba.Delivery{TriggerRef: awaitedRef, EventID: event, Digest: "d", Body: []byte(`{}`),
		Offers: []touba.MatchValue{{Key: waitKey, Value: value}}}
}

func TestWaitForEventOneNode(t *testing.T) {
	ctx := context.Background()
	q := openNodes(t, 1, time.Hour)[0].Queue
	w := leaseOne(t, q, &touba.Delivery{TriggerRef: waiterRef, EventID: "o-1", ProgramDigest: "p1", Body: []byte(`{}`)})
	if w.ProgramDigest != "p1" {
		t.Fatalf("program digest %q, want p1", w.ProgramDigest)
	}
	wakeAt := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	got, err := q.BeginWait(ctx, w.LeaseToken, touba.Wait{QueueID: w.QueueID, StepID: "paid", Kind: touba.WaitEvent,
		Key: waitKey, Value: `"o-1"`, WakeAt: &wakeAt})
	if err != nil || got.State != touba.WaitOpen {
		t.Fatalf("begin wait: %+v, %v; want open", got, err)
	}
	e := mustGet(t, q, w.QueueID)
	if e.Status != touba.StatusWaiting || e.WakeAt == nil || !e.WakeAt.Equal(wakeAt) || e.Attempts != 0 || e.LeaseOwner != "" {
		t.Fatalf("entry %+v; want waiting until %v, attempt given back, no lease", e, wakeAt)
	}
	if at, ok, err := q.NextWake(ctx); err != nil || !ok || !at.Equal(wakeAt) {
		t.Fatalf("next wake %v %v %v; want %v", at, ok, err, wakeAt)
	}
	// A later step of the run is fenced out: the lease ended.
	if err := q.Finish(ctx, w.QueueID, w.LeaseToken, touba.StatusDone, "", ""); err == nil {
		t.Fatal("finish of a waiting entry succeeded")
	}
	// Another value does not match; the awaited one does.
	if res, err := q.Enqueue(ctx, offer("pay-0", `"o-2"`)); err != nil || len(res.Matched) != 0 {
		t.Fatalf("enqueue of another value: %+v, %v; want no match", res, err)
	}
	res, err := q.Enqueue(ctx, offer("pay-1", `"o-1"`))
	if err != nil || !slices.Equal(res.Matched, []string{w.QueueID}) {
		t.Fatalf("enqueue of the awaited value: %+v, %v; want matched %s", res, err, w.QueueID)
	}
	if e := mustGet(t, q, w.QueueID); e.Status != touba.StatusPending || e.WakeAt != nil {
		t.Fatalf("matched entry %+v; want pending", e)
	}
	if _, ok, _ := q.NextWake(ctx); ok {
		t.Fatal("next wake after the match")
	}
	// The next run re-reaches the step: the wait, matched.
	again := leaseID(t, q, w.QueueID)
	got, err = q.BeginWait(ctx, again.LeaseToken, touba.Wait{QueueID: w.QueueID, StepID: "paid", Kind: touba.WaitEvent,
		Key: waitKey, Value: `"o-1"`})
	if err != nil || got.State != touba.WaitMatched || got.MatchedQueueID != res.QueueID || got.ResolvedAt == nil {
		t.Fatalf("begin wait again: %+v, %v; want matched by %s", got, err, res.QueueID)
	}
	waits, err := q.Waits(ctx, res.QueueID)
	if err != nil || len(waits) != 1 || waits[0].QueueID != w.QueueID {
		t.Fatalf("waits of the awaited delivery: %+v, %v", waits, err)
	}
	if err := q.Finish(ctx, w.QueueID, again.LeaseToken, touba.StatusDone, "", ""); err != nil {
		t.Fatal(err)
	}

	// An offer accepted before the wait began is consumed by it: the
	// entry stays running.
	if _, err := q.Enqueue(ctx, offer("pay-2", `"o-3"`)); err != nil {
		t.Fatal(err)
	}
	w3 := leaseOne(t, q, &touba.Delivery{TriggerRef: waiterRef, EventID: "o-3", Body: []byte(`{}`)})
	got, err = q.BeginWait(ctx, w3.LeaseToken, touba.Wait{QueueID: w3.QueueID, StepID: "paid", Kind: touba.WaitEvent,
		Key: waitKey, Value: `"o-3"`})
	if err != nil || got.State != touba.WaitMatched {
		t.Fatalf("begin wait on an earlier offer: %+v, %v; want matched", got, err)
	}
	if e := mustGet(t, q, w3.QueueID); e.Status != touba.StatusRunning {
		t.Fatalf("entry %s; want running", e.Status)
	}
	// The offer is consumed: a second waiter of the value waits.
	if err := q.Finish(ctx, w3.QueueID, w3.LeaseToken, touba.StatusDone, "", ""); err != nil {
		t.Fatal(err)
	}
	w4 := leaseOne(t, q, &touba.Delivery{TriggerRef: waiterRef, EventID: "o-3b", Body: []byte(`{}`)})
	got, err = q.BeginWait(ctx, w4.LeaseToken, touba.Wait{QueueID: w4.QueueID, StepID: "paid", Kind: touba.WaitEvent,
		Key: waitKey, Value: `"o-3"`})
	if err != nil || got.State != touba.WaitOpen {
		t.Fatalf("second waiter of a consumed offer: %+v, %v; want open", got, err)
	}
	// Resume of w3 from the step releases its offer...
	r, err := q.Resume(ctx, touba.ResumeRequest{QueueID: w3.QueueID, Steps: []string{"paid", "ship"}, NewEffects: true})
	if err != nil || r.From != touba.StatusDone || r.Gens["paid"] != 1 || r.Gens["ship"] != 1 {
		t.Fatalf("resume: %+v, %v", r, err)
	}
	if gens, err := q.EffectGens(ctx, w3.QueueID); err != nil || gens["paid"] != 1 {
		t.Fatalf("effect gens %v, %v", gens, err)
	}
	if ws, _ := q.Waits(ctx, w3.QueueID); len(ws) != 0 {
		t.Fatalf("waits after resume: %+v", ws)
	}
	// ... which the rerun consumes again.
	w3b := leaseID(t, q, w3.QueueID)
	got, err = q.BeginWait(ctx, w3b.LeaseToken, touba.Wait{QueueID: w3.QueueID, StepID: "paid", Kind: touba.WaitEvent,
		Key: waitKey, Value: `"o-3"`})
	if err != nil || got.State != touba.WaitMatched {
		t.Fatalf("begin wait after resume: %+v, %v; want matched by the released offer", got, err)
	}
	if _, err := q.Resume(ctx, touba.ResumeRequest{QueueID: w3.QueueID, Steps: []string{"paid"}}); touba.ErrorCode(err) != touba.EEntryNotResumable {
		t.Fatalf("resume of a running entry: %v; want %s", err, touba.EEntryNotResumable)
	}
}

func TestSleepAndWake(t *testing.T) {
	ctx := context.Background()
	q := openNodes(t, 1, time.Hour)[0].Queue
	now := time.Now().UTC().Truncate(time.Millisecond)
	var ids []string
	for i := range 3 {
		w := leaseOne(t, q, &touba.Delivery{TriggerRef: waiterRef, EventID: fmt.Sprint("s-", i), Body: []byte(`{}`)})
		at := now.Add(time.Duration(i) * time.Minute)
		if got, err := q.BeginWait(ctx, w.LeaseToken, touba.Wait{QueueID: w.QueueID, StepID: "grace", Kind: touba.WaitSleep,
			WakeAt: &at}); err != nil || got.State != touba.WaitOpen {
			t.Fatalf("sleep: %+v, %v", got, err)
		}
		ids = append(ids, w.QueueID)
	}
	if n, err := q.Wake(ctx, now.Add(90*time.Second), 10); err != nil || n != 2 {
		t.Fatalf("wake: %d, %v; want 2", n, err)
	}
	for i, id := range ids {
		want := touba.StatusPending
		if i == 2 {
			want = touba.StatusWaiting
		}
		if e := mustGet(t, q, id); e.Status != want {
			t.Fatalf("entry %d: %s, want %s", i, e.Status, want)
		}
	}
	ws, err := q.Waits(ctx, ids[0])
	if err != nil || len(ws) != 1 || ws[0].State != touba.WaitWoke || ws[0].ResolvedAt == nil {
		t.Fatalf("wait after wake: %+v, %v", ws, err)
	}
	counts, err := q.CountByStatus(ctx)
	if err != nil || counts[touba.StatusWaiting] != 1 || counts[touba.StatusPending] != 2 {
		t.Fatalf("counts %v, %v", counts, err)
	}
	byTrigger, err := q.CountByTrigger(ctx)
	if err != nil || byTrigger[waiterRef][touba.StatusWaiting] != 1 {
		t.Fatalf("counts by trigger %v, %v", byTrigger, err)
	}
}

func TestCancelOn(t *testing.T) {
	ctx := context.Background()
	q := openNodes(t, 1, time.Hour)[0].Queue
	ck := touba.CancelKey(waiterRef, 0)
	withKey := func(ev string) *touba.Delivery {
		return &touba.Delivery{TriggerRef: waiterRef, EventID: ev, Digest: "d", Body: []byte(`{}`),
			CancelKeys: []touba.MatchValue{{Key: ck, Value: `"` + ev + `"`}}}
	}
	cancel := func(ev, of string) touba.EnqueueResult {
		t.Helper()
		res, err := q.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:orders/Cancelled", EventID: ev, Digest: "d",
			Body: []byte(`{}`), Cancels: []touba.MatchValue{{Key: ck, Value: `"` + of + `"`}}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// Running: asked to cancel; it ends cancelled at its next retry.
	run := leaseOne(t, q, withKey("a"))
	if res := cancel("c-a", "a"); !slices.Equal(res.Cancelled, []string{run.QueueID}) {
		t.Fatalf("cancelled %v, want %s", res.Cancelled, run.QueueID)
	}
	if yes, err := q.CancelRequested(ctx, run.QueueID); err != nil || !yes {
		t.Fatalf("cancel requested %v %v", yes, err)
	}
	if err := q.Retry(ctx, run.QueueID, run.LeaseToken, time.Now(), touba.EHandlerFailed, "boom"); err != nil {
		t.Fatal(err)
	}
	if e := mustGet(t, q, run.QueueID); e.Status != touba.StatusCancelled || e.ErrorCode != touba.ERunCancelled {
		t.Fatalf("entry after retry: %s %s; want cancelled %s", e.Status, e.ErrorCode, touba.ERunCancelled)
	}
	// Waiting: cancelled at once, its wait too.
	wt := leaseOne(t, q, withKey("b"))
	if _, err := q.BeginWait(ctx, wt.LeaseToken, touba.Wait{QueueID: wt.QueueID, StepID: "paid", Kind: touba.WaitEvent,
		Key: waitKey, Value: `"b"`}); err != nil {
		t.Fatal(err)
	}
	if res := cancel("c-b", "b"); !slices.Equal(res.Cancelled, []string{wt.QueueID}) {
		t.Fatalf("cancelled %v, want %s", res.Cancelled, wt.QueueID)
	}
	e := mustGet(t, q, wt.QueueID)
	d, _ := q.Detail(ctx, wt.QueueID)
	if e.Status != touba.StatusCancelled || d == nil || d.ErrorMessage == "" {
		t.Fatalf("waiting entry after cancel: %+v %+v", e, d)
	}
	if ws, _ := q.Waits(ctx, wt.QueueID); len(ws) != 1 || ws[0].State != touba.WaitCancelled {
		t.Fatalf("wait after cancel: %+v", ws)
	}
	// A later offer finds no open wait.
	if res, err := q.Enqueue(ctx, offer("pay-b", `"b"`)); err != nil || len(res.Matched) != 0 {
		t.Fatalf("offer after cancel: %+v %v", res, err)
	}
	// Replay runs it again: the cancelled wait is gone, the step waits anew.
	if out, err := q.Replay(ctx, []string{wt.QueueID}, touba.ReplayOptions{}); err != nil || out[0].From != touba.StatusCancelled {
		t.Fatalf("replay %+v %v", out, err)
	}
	if ws, _ := q.Waits(ctx, wt.QueueID); len(ws) != 0 {
		t.Fatalf("waits after replay: %+v", ws)
	}
	// Pending: cancelled at once; other values untouched.
	p, err := q.Enqueue(ctx, withKey("c"))
	if err != nil {
		t.Fatal(err)
	}
	if res := cancel("c-x", "x"); len(res.Cancelled) != 0 {
		t.Fatalf("cancel of another value cancelled %v", res.Cancelled)
	}
	cancel("c-c", "c")
	if e := mustGet(t, q, p.QueueID); e.Status != touba.StatusCancelled {
		t.Fatalf("pending entry after cancel: %s", e.Status)
	}
	// A cancel request meets BeginWait: cancelled there.
	r2 := leaseOne(t, q, withKey("d"))
	cancel("c-d", "d")
	later := time.Now().Add(time.Hour)
	got, err := q.BeginWait(ctx, r2.LeaseToken, touba.Wait{QueueID: r2.QueueID, StepID: "grace", Kind: touba.WaitSleep, WakeAt: &later})
	if err != nil || got.State != touba.WaitCancelled {
		t.Fatalf("begin wait asked to cancel: %+v %v", got, err)
	}
	if e := mustGet(t, q, r2.QueueID); e.Status != touba.StatusCancelled {
		t.Fatalf("entry after begin wait asked to cancel: %s", e.Status)
	}
}

func TestPrograms(t *testing.T) {
	ctx := context.Background()
	q := openNodes(t, 1, time.Hour)[0].Queue
	if def, err := q.Program(ctx, "nope"); err != nil || def != nil {
		t.Fatalf("unknown program: %q %v", def, err)
	}
	for range 2 {
		if err := q.SaveProgram(ctx, "abc", []byte(`{"steps":[]}`)); err != nil {
			t.Fatal(err)
		}
	}
	if def, err := q.Program(ctx, "abc"); err != nil || string(def) != `{"steps":[]}` {
		t.Fatalf("program: %q %v", def, err)
	}
}

// TestRetentionPrunesWaits: the waits, offers and cancel keys of done
// entries go with their bodies; those of entries that may still run stay.
func TestRetentionPrunesWaits(t *testing.T) {
	ctx := context.Background()
	st := openNodes(t, 1, time.Hour)[0]
	q := st.Queue
	ck := touba.CancelKey(waiterRef, 0)
	waiter := func(ev string) *touba.Delivery {
		return leaseOne(t, q, &touba.Delivery{TriggerRef: waiterRef, EventID: ev, Body: []byte(`{}`),
			CancelKeys: []touba.MatchValue{{Key: ck, Value: `"` + ev + `"`}}})
	}
	done := waiter("done")
	if _, err := q.BeginWait(ctx, done.LeaseToken, touba.Wait{QueueID: done.QueueID, StepID: "paid", Kind: touba.WaitEvent,
		Key: waitKey, Value: `"done"`}); err != nil {
		t.Fatal(err)
	}
	pay, err := q.Enqueue(ctx, offer("pay-done", `"done"`))
	if err != nil || len(pay.Matched) != 1 {
		t.Fatalf("offer: %+v %v", pay, err)
	}
	done = leaseID(t, q, done.QueueID)
	if err := q.Finish(ctx, done.QueueID, done.LeaseToken, touba.StatusDone, "", ""); err != nil {
		t.Fatal(err)
	}
	// Still waiting: kept, with its cancel key.
	waiting := waiter("waiting")
	if _, err := q.BeginWait(ctx, waiting.LeaseToken, touba.Wait{QueueID: waiting.QueueID, StepID: "paid", Kind: touba.WaitEvent,
		Key: waitKey, Value: `"waiting"`}); err != nil {
		t.Fatal(err)
	}
	n, err := q.PurgeBodies(ctx, time.Now().Add(time.Hour))
	if err != nil || n != 2 {
		// The waiter and the offering delivery (leaseID ended it done).
		t.Fatalf("purged %d, %v; want 2", n, err)
	}
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		if err := st.db.pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if ws, _ := q.Waits(ctx, done.QueueID); len(ws) != 0 {
		t.Fatalf("waits of a purged entry: %+v", ws)
	}
	if n := count(`SELECT COUNT(*) FROM touba.offers WHERE queue_id = $1`, pay.QueueID); n != 0 {
		t.Fatalf("%d offers consumed by a purged entry kept", n)
	}
	if n := count(`SELECT COUNT(*) FROM touba.cancel_keys WHERE queue_id = $1`, done.QueueID); n != 0 {
		t.Fatalf("%d cancel keys of a purged entry kept", n)
	}
	if ws, _ := q.Waits(ctx, waiting.QueueID); len(ws) != 1 || ws[0].State != touba.WaitOpen {
		t.Fatalf("waits of a waiting entry after the purge: %+v", ws)
	}
	if n := count(`SELECT COUNT(*) FROM touba.cancel_keys WHERE queue_id = $1`, waiting.QueueID); n != 1 {
		t.Fatalf("cancel keys of a waiting entry after the purge: %d", n)
	}
}
