package storetest

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Durable steps (touba.WaitStore, SPEC §2.3): sleeps and their wake, event
// waits matched by a later or an earlier delivery, timeouts, cancellation
// by cancel_on, resume from a step, version pinning's programs, and what a
// waiting entry is to the rest of the queue (no lease, its attempt given
// back, its concurrency key kept).
func runWaits(t *testing.T, f Factory) {
	t.Run("SleepBeginAndWake", func(t *testing.T) { testSleepWake(t, f) })
	t.Run("WaitMatchedByLaterDelivery", func(t *testing.T) { testMatchLater(t, f) })
	t.Run("WaitMatchedByEarlierDelivery", func(t *testing.T) { testMatchEarlier(t, f) })
	t.Run("OfferConsumedOncePerKey", func(t *testing.T) { testOfferOncePerKey(t, f) })
	t.Run("OffersAndWaitsRace", func(t *testing.T) { testOfferRace(t, f) })
	t.Run("Timeout", func(t *testing.T) { testWaitTimeout(t, f) })
	t.Run("CancelPendingWaitingRunning", func(t *testing.T) { testCancel(t, f) })
	t.Run("CancelRequestedTransitions", func(t *testing.T) { testCancelRequested(t, f) })
	t.Run("ReplayCancelledWaitsAgain", func(t *testing.T) { testReplayCancelled(t, f) })
	t.Run("Resume", func(t *testing.T) { testResume(t, f) })
	t.Run("ResumeReleasesOffers", func(t *testing.T) { testResumeOffers(t, f) })
	t.Run("BeginWaitLostLease", func(t *testing.T) { testBeginWaitLeaseLost(t, f) })
	t.Run("NextWakeAndLimit", func(t *testing.T) { testNextWake(t, f) })
	t.Run("Programs", func(t *testing.T) { testPrograms(t, f) })
	t.Run("WaitingHoldsItsKey", func(t *testing.T) { testWaitingHoldsKey(t, f) })
}

func waitStore(t *testing.T, e *env) touba.WaitStore {
	t.Helper()
	ws, ok := e.Queue.(touba.WaitStore)
	if !ok {
		t.Skip("the queue store keeps no waits (touba.WaitStore)")
	}
	return ws
}

// Keys and values of the cases: trigger:a waits for trigger:b and is
// cancelled by it.
var (
	keyA   = touba.WaitKey("trigger:a", "await")
	keyA2  = touba.WaitKey("trigger:a", "await2")
	cancel = touba.CancelKey("trigger:a", 0)
)

// putOf enqueues a new delivery of ref; edit sets its match values.
func (e *env) putOf(t *testing.T, ref, eventID string, edit func(d *touba.Delivery)) touba.EnqueueResult {
	t.Helper()
	d := delivery(eventID, `{"id":"`+eventID+`"}`)
	d.TriggerRef = ref
	if edit != nil {
		edit(d)
	}
	r := e.enqueue(t, d)
	if !r.Created {
		t.Fatalf("enqueue %s/%s: %+v, want a new entry", ref, eventID, r)
	}
	return r
}

// offering enqueues a delivery of trigger:b offering value to the waits of
// the keys.
func (e *env) offering(t *testing.T, eventID, value string, keys ...string) touba.EnqueueResult {
	t.Helper()
	return e.putOf(t, "trigger:b", eventID, func(d *touba.Delivery) {
		for _, k := range keys {
			d.Offers = append(d.Offers, touba.MatchValue{Key: k, Value: value})
		}
	})
}

// waiter is a new entry of trigger:a, leased (it must be the only one due).
func (e *env) waiter(t *testing.T, eventID string, cancelValue string) string {
	t.Helper()
	id := e.putOf(t, "trigger:a", eventID, func(d *touba.Delivery) {
		if cancelValue != "" {
			d.CancelKeys = []touba.MatchValue{{Key: cancel, Value: cancelValue}}
		}
	}).QueueID
	e.lease(t, 10, id)
	return id
}

func (e *env) begin(t *testing.T, ws touba.WaitStore, w touba.Wait) touba.Wait {
	t.Helper()
	got, err := ws.BeginWait(e.ctx, e.tok(w.QueueID), w)
	if err != nil {
		t.Fatalf("begin wait %s/%s: %v", w.QueueID, w.StepID, err)
	}
	return got
}

func sleepFor(queueID, step string, until time.Time) touba.Wait {
	return touba.Wait{QueueID: queueID, StepID: step, Kind: touba.WaitSleep, WakeAt: &until}
}

func eventWait(queueID, step, key, value string, timeout *time.Time) touba.Wait {
	return touba.Wait{QueueID: queueID, StepID: step, Kind: touba.WaitEvent, Key: key, Value: value, WakeAt: timeout}
}

// wantStatus checks an entry's status (and error code when code is set).
func (e *env) wantStatus(t *testing.T, queueID, status, code string) *touba.Delivery {
	t.Helper()
	got := e.get(t, queueID)
	if got.Status != status || (code != "" && got.ErrorCode != code) {
		t.Fatalf("%s: %s (%s), want %s (%s)", queueID, got.Status, got.ErrorCode, status, code)
	}
	return got
}

// waitOf is the wait of (queueID, step) as Waits lists it.
func (e *env) waitOf(t *testing.T, ws touba.WaitStore, queueID, step string) (touba.Wait, bool) {
	t.Helper()
	all, err := ws.Waits(e.ctx, queueID)
	if err != nil {
		t.Fatalf("waits of %s: %v", queueID, err)
	}
	for _, w := range all {
		if w.QueueID == queueID && w.StepID == step {
			return w, true
		}
	}
	return touba.Wait{}, false
}

func (e *env) wake(t *testing.T, ws touba.WaitStore, at time.Time, limit int, want int64) {
	t.Helper()
	if n, err := ws.Wake(e.ctx, at, limit); err != nil || n != want {
		t.Fatalf("wake at %v: %d, %v; want %d", at, n, err, want)
	}
}

func (e *env) wantNextWake(t *testing.T, ws touba.WaitStore, want *time.Time) {
	t.Helper()
	at, ok, err := ws.NextWake(e.ctx)
	switch {
	case err != nil:
		t.Fatalf("next wake: %v", err)
	case want == nil && ok:
		t.Fatalf("next wake %v, want none", at)
	case want != nil && (!ok || !at.Equal(*want)):
		t.Fatalf("next wake %v (%v), want %v", at, ok, *want)
	}
}

func testSleepWake(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	a := e.waiter(t, "a", "")
	end := e.clock.Now().Add(time.Hour)
	w := e.begin(t, ws, sleepFor(a, "nap", end))
	if w.State != touba.WaitOpen || w.Kind != touba.WaitSleep || w.WakeAt == nil || !w.WakeAt.Equal(end) {
		t.Fatalf("begun sleep: %+v, want open until %v", w, end)
	}
	got := e.wantStatus(t, a, touba.StatusWaiting, "")
	if got.Attempts != 0 || got.WakeAt == nil || !got.WakeAt.Equal(end) {
		t.Fatalf("waiting entry: attempts %d, wake at %v; want 0 (the lease's attempt given back), %v", got.Attempts, got.WakeAt, end)
	}
	e.wantPending(t, 0)
	e.lease(t, 10)
	e.wantNextWake(t, ws, &end)
	if c, err := e.Queue.CountByStatus(e.ctx); err != nil || c[touba.StatusWaiting] != 1 {
		t.Fatalf("counts %v, %v; want 1 waiting", c, err)
	}

	// Waiting survives a restart, and RequeueRunning leaves it alone.
	e = e.reopen(t)
	ws = waitStore(t, e)
	if n, err := e.Queue.RequeueRunning(e.ctx); err != nil || n != 0 {
		t.Fatalf("requeue: %d, %v; want 0", n, err)
	}
	e.wake(t, ws, e.clock.Now(), 10, 0)
	e.wake(t, ws, end.Add(-time.Millisecond), 10, 0)
	e.wantStatus(t, a, touba.StatusWaiting, "")
	e.clock.Add(time.Hour)
	e.wake(t, ws, end, 10, 1)
	e.wake(t, ws, end, 10, 0)
	e.wantPending(t, 1)
	e.wantNextWake(t, ws, nil)
	if got := e.wantStatus(t, a, touba.StatusPending, ""); got.WakeAt != nil {
		t.Fatalf("woken entry keeps wake at %v", got.WakeAt)
	}
	if w, ok := e.waitOf(t, ws, a, "nap"); !ok || w.State != touba.WaitWoke || w.ResolvedAt == nil {
		t.Fatalf("wait after wake: %+v (%v), want woke with its time", w, ok)
	}

	// The next run re-reaches the step: the ended wait, entry still running.
	if got := e.lease(t, 10, a); got[0].Attempts != 1 {
		t.Fatalf("attempts %d on the lease after the wake, want 1", got[0].Attempts)
	}
	again := e.begin(t, ws, sleepFor(a, "nap", end.Add(time.Hour)))
	if again.State != touba.WaitWoke || !again.WakeAt.Equal(end) {
		t.Fatalf("second begin: %+v, want the woke wait unchanged", again)
	}
	e.wantStatus(t, a, touba.StatusRunning, "")
	e.finish(t, a, touba.StatusDone)
}

func testMatchLater(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	w1 := e.waiter(t, "w1", "")
	if got := e.begin(t, ws, eventWait(w1, "await", keyA, `"o1"`, nil)); got.State != touba.WaitOpen {
		t.Fatalf("begun wait: %+v, want open", got)
	}
	e.clock.Add(time.Second)
	w2 := e.waiter(t, "w2", "")
	e.begin(t, ws, eventWait(w2, "await", keyA, `"o1"`, nil))
	e.wantStatus(t, w1, touba.StatusWaiting, "")
	e.wantNextWake(t, ws, nil) // no timeout: nothing to wake by time

	// Another value, or another key, matches nothing.
	if r := e.offering(t, "other-value", `"o2"`, keyA); len(r.Matched) != 0 {
		t.Fatalf("offer of another value matched %v", r.Matched)
	}
	if r := e.offering(t, "other-key", `"o1"`, keyA2); len(r.Matched) != 0 {
		t.Fatalf("offer of another key matched %v", r.Matched)
	}
	e.wantPending(t, 2)

	// The earliest open wait takes the match.
	r := e.offering(t, "b1", `"o1"`, keyA)
	if !slices.Equal(r.Matched, []string{w1}) || len(r.Cancelled) != 0 {
		t.Fatalf("matched %v, cancelled %v; want [%s]", r.Matched, r.Cancelled, w1)
	}
	e.wantPending(t, 4)
	e.wantStatus(t, w1, touba.StatusPending, "")
	e.wantStatus(t, w2, touba.StatusWaiting, "")
	w, ok := e.waitOf(t, ws, w1, "await")
	if !ok || w.State != touba.WaitMatched || w.MatchedQueueID != r.QueueID || w.ResolvedAt == nil {
		t.Fatalf("wait of %s: %+v, want matched by %s", w1, w, r.QueueID)
	}
	// The awaited delivery shows the wait it matched.
	if from, err := ws.Waits(e.ctx, r.QueueID); err != nil || len(from) != 1 || from[0].QueueID != w1 {
		t.Fatalf("waits of the matching delivery: %+v, %v", from, err)
	}
	r2 := e.offering(t, "b2", `"o1"`, keyA)
	if !slices.Equal(r2.Matched, []string{w2}) {
		t.Fatalf("second offer matched %v, want [%s]", r2.Matched, w2)
	}
	// A redelivery is no new offer.
	d := delivery("b2", `{"id":"b2"}`)
	d.TriggerRef, d.Offers = "trigger:b", []touba.MatchValue{{Key: keyA, Value: `"o1"`}}
	if dup := e.enqueue(t, d); dup.Created || len(dup.Matched) != 0 {
		t.Fatalf("redelivery: %+v", dup)
	}

	// The re-run reads the match; the entry stays running.
	e.clock.Add(time.Second)
	leased, err := e.Queue.Lease(e.ctx, 10)
	if err != nil || !slices.Contains(idsOf(leased), w1) {
		t.Fatalf("leased %v, %v; want %s among them", idsOf(leased), err, w1)
	}
	got := e.begin(t, ws, eventWait(w1, "await", keyA, `"o1"`, nil))
	if got.State != touba.WaitMatched || got.MatchedQueueID != r.QueueID {
		t.Fatalf("re-run's wait: %+v", got)
	}
	e.wantStatus(t, w1, touba.StatusRunning, "")
}

func idsOf(ds []*touba.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.QueueID
	}
	return out
}

func testMatchEarlier(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	b1 := e.offering(t, "b1", `"o1"`, keyA).QueueID
	e.clock.Add(time.Second)
	b2 := e.offering(t, "b2", `"o1"`, keyA).QueueID
	e.lease(t, 10, b1, b2)
	e.finish(t, b1, touba.StatusDone)
	e.finish(t, b2, touba.StatusDone)

	// Each wait takes the earliest unconsumed offer, and stays running.
	for i, want := range []string{b1, b2} {
		w := e.waiter(t, fmt.Sprintf("w%d", i), "")
		got := e.begin(t, ws, eventWait(w, "await", keyA, `"o1"`, nil))
		if got.State != touba.WaitMatched || got.MatchedQueueID != want || got.ResolvedAt == nil {
			t.Fatalf("wait %d: %+v, want matched by %s", i, got, want)
		}
		if d := e.wantStatus(t, w, touba.StatusRunning, ""); d.Attempts != 1 {
			t.Fatalf("attempts %d of a wait matched at once, want 1 (the lease's)", d.Attempts)
		}
		e.finish(t, w, touba.StatusDone)
	}
	// None left: the next one waits.
	w := e.waiter(t, "w-last", "")
	if got := e.begin(t, ws, eventWait(w, "await", keyA, `"o1"`, nil)); got.State != touba.WaitOpen {
		t.Fatalf("third wait: %+v, want open (both offers consumed)", got)
	}
	e.wantStatus(t, w, touba.StatusWaiting, "")
}

func testOfferOncePerKey(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	// One delivery offers the same value to the waits of two keys.
	b := e.offering(t, "b", `7`, keyA, keyA2).QueueID
	e.lease(t, 10, b)
	e.finish(t, b, touba.StatusDone)
	k1 := e.waiter(t, "k1", "")
	if got := e.begin(t, ws, eventWait(k1, "await", keyA, `7`, nil)); got.State != touba.WaitMatched || got.MatchedQueueID != b {
		t.Fatalf("first wait of key A: %+v, want matched by %s", got, b)
	}
	e.finish(t, k1, touba.StatusDone)
	k1b := e.waiter(t, "k1b", "")
	if got := e.begin(t, ws, eventWait(k1b, "await", keyA, `7`, nil)); got.State != touba.WaitOpen {
		t.Fatalf("second wait of key A: %+v, want open (the offer is consumed)", got)
	}
	k2 := e.waiter(t, "k2", "")
	if got := e.begin(t, ws, eventWait(k2, "await2", keyA2, `7`, nil)); got.State != touba.WaitMatched || got.MatchedQueueID != b {
		t.Fatalf("wait of key A2: %+v, want matched by %s (its own offer)", got, b)
	}
}

// testOfferRace: waits and offers of one (key, value) committing
// concurrently never miss each other and never share an offer.
func testOfferRace(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	const waiters, offers = 12, 8
	ids := make([]string, waiters)
	for i := range ids {
		ids[i] = e.putOf(t, "trigger:a", fmt.Sprintf("w%d", i), nil).QueueID
	}
	leased, err := e.Queue.Lease(e.ctx, waiters)
	if err != nil || len(leased) != waiters {
		t.Fatalf("lease: %d, %v", len(leased), err)
	}
	toks := map[string]int64{}
	for _, d := range leased {
		toks[d.QueueID] = d.LeaseToken
	}
	var mu sync.Mutex
	offered := map[string]bool{}
	parallel(t, waiters+offers, func(i int) error {
		if i < waiters {
			_, err := ws.BeginWait(e.ctx, toks[ids[i]], eventWait(ids[i], "await", keyA, `"x"`, nil))
			return err
		}
		d := delivery(fmt.Sprintf("b%d", i), "b")
		d.TriggerRef, d.Offers = "trigger:b", []touba.MatchValue{{Key: keyA, Value: `"x"`}}
		r, err := e.Queue.Enqueue(e.ctx, d)
		if err == nil {
			mu.Lock()
			offered[r.QueueID] = true
			mu.Unlock()
		}
		return err
	})
	by := map[string]string{}
	for _, id := range ids {
		w, ok := e.waitOf(t, ws, id, "await")
		if !ok {
			t.Fatalf("no wait stored for %s", id)
		}
		switch w.State {
		case touba.WaitMatched:
			if !offered[w.MatchedQueueID] {
				t.Fatalf("%s matched by %q, no offering delivery", id, w.MatchedQueueID)
			}
			if prev, dup := by[w.MatchedQueueID]; dup {
				t.Fatalf("offer of %s consumed by %s and %s", w.MatchedQueueID, prev, id)
			}
			by[w.MatchedQueueID] = id
		case touba.WaitOpen:
			e.wantStatus(t, id, touba.StatusWaiting, "")
		default:
			t.Fatalf("wait of %s: %+v", id, w)
		}
	}
	if len(by) != offers {
		t.Fatalf("%d offers consumed of %d, with %d waits: a wait and an offer missed each other", len(by), offers, waiters)
	}
}

func testWaitTimeout(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	a := e.waiter(t, "a", "")
	timeout := e.clock.Now().Add(10 * time.Minute)
	e.begin(t, ws, eventWait(a, "await", keyA, `1`, &timeout))
	e.wantNextWake(t, ws, &timeout)
	e.clock.Add(10 * time.Minute)
	e.wake(t, ws, e.clock.Now(), 0, 1)
	e.wantStatus(t, a, touba.StatusPending, "")
	if w, ok := e.waitOf(t, ws, a, "await"); !ok || w.State != touba.WaitTimedOut {
		t.Fatalf("wait after its timeout: %+v (%v), want timed_out", w, ok)
	}
	// A late delivery matches nothing; the re-run reads the timeout.
	if r := e.offering(t, "late", `1`, keyA); len(r.Matched) != 0 {
		t.Fatalf("late offer matched %v", r.Matched)
	}
	e.lease(t, 1, a)
	if got := e.begin(t, ws, eventWait(a, "await", keyA, `1`, &timeout)); got.State != touba.WaitTimedOut {
		t.Fatalf("re-run's wait: %+v, want timed_out", got)
	}
}

func testCancel(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	sleeper := e.waiter(t, "sleeper", "1")
	end := e.clock.Now().Add(time.Hour)
	e.begin(t, ws, sleepFor(sleeper, "nap", end))
	running := e.waiter(t, "running", "1")
	pending := e.putOf(t, "trigger:a", "pending", func(d *touba.Delivery) {
		d.CancelKeys = []touba.MatchValue{{Key: cancel, Value: "1"}}
	}).QueueID
	other := e.putOf(t, "trigger:a", "other", func(d *touba.Delivery) {
		d.CancelKeys = []touba.MatchValue{{Key: cancel, Value: "2"}}
	}).QueueID
	e.wantPending(t, 2)

	r := e.putOf(t, "trigger:b", "b", func(d *touba.Delivery) {
		d.Cancels = []touba.MatchValue{{Key: cancel, Value: "1"}}
	})
	got := append([]string(nil), r.Cancelled...)
	sort.Strings(got)
	want := []string{sleeper, running, pending}
	sort.Strings(want)
	if !slices.Equal(got, want) || len(r.Matched) != 0 {
		t.Fatalf("cancelled %v, want %v", r.Cancelled, want)
	}
	e.wantPending(t, 2) // other and b
	e.wantStatus(t, pending, touba.StatusCancelled, touba.ERunCancelled)
	e.wantStatus(t, sleeper, touba.StatusCancelled, touba.ERunCancelled)
	e.wantStatus(t, other, touba.StatusPending, "")
	if d, _ := e.Queue.Detail(e.ctx, pending); d == nil || d.ErrorMessage == "" {
		t.Fatalf("cancelled entry's detail %+v: want a message naming the cancelling delivery", d)
	}
	if w, ok := e.waitOf(t, ws, sleeper, "nap"); !ok || w.State != touba.WaitCancelled {
		t.Fatalf("cancelled sleeper's wait: %+v (%v), want cancelled", w, ok)
	}
	e.wantNextWake(t, ws, nil)
	// The running one goes on until its next transition.
	e.wantStatus(t, running, touba.StatusRunning, "")
	for id, want := range map[string]bool{running: true, other: false, pending: false} {
		if req, err := ws.CancelRequested(e.ctx, id); err != nil || req != want {
			t.Fatalf("cancel requested of %s: %v, %v; want %v", id, req, err, want)
		}
	}
	if err := e.Queue.Retry(e.ctx, running, e.tok(running), e.clock.Now(), touba.EHandlerFailed, "boom"); err != nil {
		t.Fatalf("retry of an entry asked to cancel: %v", err)
	}
	e.wantStatus(t, running, touba.StatusCancelled, touba.ERunCancelled)
	e.wantPending(t, 2)
	if c, err := e.Queue.CountByStatus(e.ctx); err != nil || c[touba.StatusCancelled] != 3 {
		t.Fatalf("counts %v, %v; want 3 cancelled", c, err)
	}
}

// testCancelRequested: what each ending does to an entry asked to cancel
// while it runs.
func testCancelRequested(t *testing.T, f Factory) {
	tests := []struct {
		name string
		end  func(e *env, ws touba.WaitStore, id string) error
		want string
	}{
		{"Retry", func(e *env, _ touba.WaitStore, id string) error {
			return e.Queue.Retry(e.ctx, id, e.tok(id), e.clock.Now(), "X", "x")
		}, touba.StatusCancelled},
		{"Postpone", func(e *env, _ touba.WaitStore, id string) error {
			return e.Queue.Postpone(e.ctx, id, e.tok(id), e.clock.Now(), "X", "x")
		}, touba.StatusCancelled},
		{"FinishFailed", func(e *env, _ touba.WaitStore, id string) error {
			return e.Queue.Finish(e.ctx, id, e.tok(id), touba.StatusFailed, touba.EHandlerFailed, "x")
		}, touba.StatusCancelled},
		{"FinishCancelled", func(e *env, _ touba.WaitStore, id string) error {
			return e.Queue.Finish(e.ctx, id, e.tok(id), touba.StatusCancelled, touba.ERunCancelled, "seen before a step")
		}, touba.StatusCancelled},
		{"BeginWait", func(e *env, ws touba.WaitStore, id string) error {
			w, err := ws.BeginWait(e.ctx, e.tok(id), sleepFor(id, "nap", e.clock.Now().Add(time.Hour)))
			if err == nil && w.State != touba.WaitCancelled {
				return fmt.Errorf("wait %+v, want cancelled", w)
			}
			return err
		}, touba.StatusCancelled},
		{"FinishDoneStaysDone", func(e *env, _ touba.WaitStore, id string) error {
			return e.Queue.Finish(e.ctx, id, e.tok(id), touba.StatusDone, "", "")
		}, touba.StatusDone},
		{"FinishParkedStaysParked", func(e *env, _ touba.WaitStore, id string) error {
			return e.Queue.Finish(e.ctx, id, e.tok(id), touba.StatusParked, touba.EEffectOutcomeUnknown, "x")
		}, touba.StatusParked},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := open(t, f, Options{})
			ws := waitStore(t, e)
			id := e.waiter(t, "a", "1")
			e.putOf(t, "trigger:b", "b", func(d *touba.Delivery) {
				d.Cancels = []touba.MatchValue{{Key: cancel, Value: "1"}}
			})
			if err := tc.end(e, ws, id); err != nil {
				t.Fatal(err)
			}
			code := ""
			if tc.want == touba.StatusCancelled {
				code = touba.ERunCancelled
			}
			e.wantStatus(t, id, tc.want, code)
			e.wantPending(t, 1) // b only
			e.wantNextWake(t, ws, nil)
			if w, ok := e.waitOf(t, ws, id, "nap"); ok && w.State == touba.WaitOpen {
				t.Fatalf("open wait %+v left on a cancelled entry", w)
			}
		})
	}
}

// testReplayCancelled: an entry cancelled while it waited, replayed, waits
// again (its cancelled wait is gone, and so is the cancel request).
func testReplayCancelled(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	a := e.waiter(t, "a", "1")
	e.begin(t, ws, eventWait(a, "await", keyA, `1`, nil))
	running := e.waiter(t, "running", "1")
	e.putOf(t, "trigger:b", "b", func(d *touba.Delivery) {
		d.Cancels = []touba.MatchValue{{Key: cancel, Value: "1"}}
	})
	if err := e.Queue.Finish(e.ctx, running, e.tok(running), touba.StatusFailed, "X", "x"); err != nil {
		t.Fatal(err)
	}
	e.wantStatus(t, running, touba.StatusCancelled, touba.ERunCancelled)
	res, err := e.Queue.Replay(e.ctx, []string{a, running})
	if err != nil || len(res) != 2 || res[0].From != touba.StatusCancelled || res[1].From != touba.StatusCancelled {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	e.wantPending(t, 3)
	for _, id := range []string{a, running} {
		if req, err := ws.CancelRequested(e.ctx, id); err != nil || req {
			t.Fatalf("cancel requested of replayed %s: %v, %v", id, req, err)
		}
	}
	e.lease(t, 10, a, running, e.entryOf(t, "trigger:b", "b"))
	if got := e.begin(t, ws, eventWait(a, "await", keyA, `1`, nil)); got.State != touba.WaitOpen {
		t.Fatalf("replayed entry's wait: %+v, want open again", got)
	}
	e.finish(t, running, touba.StatusFailed)
	e.wantStatus(t, running, touba.StatusFailed, "")

	// So does one resumed from a later step: its cancelled wait never
	// completed the step.
	e.putOf(t, "trigger:b", "b2", func(d *touba.Delivery) {
		d.Cancels = []touba.MatchValue{{Key: cancel, Value: "1"}}
	})
	e.wantStatus(t, a, touba.StatusCancelled, touba.ERunCancelled)
	if _, err := ws.Resume(e.ctx, touba.ResumeRequest{QueueID: a, Steps: []string{"after-await"}}); err != nil {
		t.Fatal(err)
	}
	e.lease(t, 10, a, e.entryOf(t, "trigger:b", "b2"))
	if got := e.begin(t, ws, eventWait(a, "await", keyA, `1`, nil)); got.State != touba.WaitOpen {
		t.Fatalf("resumed entry's wait: %+v, want open again", got)
	}
}

// entryOf is the queue id of ref's entry of eventID.
func (e *env) entryOf(t *testing.T, ref, eventID string) string {
	t.Helper()
	for _, d := range e.entries(t) {
		if d.TriggerRef == ref && d.EventID == eventID {
			return d.QueueID
		}
	}
	t.Fatalf("no entry %s/%s", ref, eventID)
	return ""
}

func testResume(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	// Refused while the entry is pending, running or waiting.
	waiting := e.waiter(t, "waiting", "")
	e.begin(t, ws, sleepFor(waiting, "nap", e.clock.Now().Add(time.Hour)))
	running := e.waiter(t, "running", "")
	pending := e.putOf(t, "trigger:p", "pending", nil).QueueID
	for _, id := range []string{pending, waiting, running} {
		_, err := ws.Resume(e.ctx, touba.ResumeRequest{QueueID: id, Steps: []string{"nap"}})
		if touba.ErrorCode(err) != touba.EEntryNotResumable {
			t.Fatalf("resume of %s: %v, want %s", id, err, touba.EEntryNotResumable)
		}
	}
	if _, err := ws.Resume(e.ctx, touba.ResumeRequest{QueueID: "no-such-entry", Steps: []string{"nap"}}); err == nil {
		t.Fatal("resume of no entry accepted")
	}
	e.wantStatus(t, running, touba.StatusRunning, "")
	e.wantStatus(t, waiting, touba.StatusWaiting, "")
	e.wantPending(t, 1)

	// waiting ends done with its sleep woke; running ends failed with two
	// ended waits.
	e.clock.Add(time.Hour)
	e.wake(t, ws, e.clock.Now(), 0, 1)
	e.lease(t, 10, waiting, pending)
	e.finish(t, pending, touba.StatusDone)
	e.begin(t, ws, sleepFor(waiting, "nap", e.clock.Now()))
	e.finish(t, waiting, touba.StatusDone)
	timeout := e.clock.Now()
	e.begin(t, ws, eventWait(running, "await", keyA, `1`, &timeout))
	e.wake(t, ws, e.clock.Now(), 0, 1)
	e.lease(t, 10, running)
	if got := e.begin(t, ws, eventWait(running, "await", keyA, `1`, &timeout)); got.State != touba.WaitTimedOut {
		t.Fatalf("wait: %+v, want timed_out", got)
	}
	e.begin(t, ws, sleepFor(running, "later", e.clock.Now()))
	e.wake(t, ws, e.clock.Now(), 0, 1)
	e.lease(t, 10, running)
	if err := e.Queue.Finish(e.ctx, running, e.tok(running), touba.StatusFailed, touba.EWaitTimedOut, "no match"); err != nil {
		t.Fatal(err)
	}
	e.wantPending(t, 0)
	if g, err := ws.EffectGens(e.ctx, running); err != nil || len(g) != 0 {
		t.Fatalf("effect gens before any resume: %v, %v", g, err)
	}
	res, err := ws.Resume(e.ctx, touba.ResumeRequest{QueueID: running, Steps: []string{"await", "later"}})
	if err != nil || res.From != touba.StatusFailed || res.QueueID != running || res.Gens["await"] != 0 || res.Gens["later"] != 0 {
		t.Fatalf("resume: %+v, %v", res, err)
	}
	got := e.wantStatus(t, running, touba.StatusPending, "")
	if got.Attempts != 0 || got.ErrorCode != "" {
		t.Fatalf("resumed entry: attempts %d, error %q; want 0 and none", got.Attempts, got.ErrorCode)
	}
	e.wantPending(t, 1)
	if all, err := ws.Waits(e.ctx, running); err != nil || len(all) != 0 {
		t.Fatalf("waits after the resume: %+v, %v; want none", all, err)
	}
	if g, err := ws.EffectGens(e.ctx, running); err != nil || g["await"] != 0 || g["later"] != 0 {
		t.Fatalf("effect gens after a resume without new effects: %v, %v", g, err)
	}

	// With new effects, each resumed step's generation moves on, the
	// others' stay.
	e.lease(t, 10, running)
	e.finish(t, running, touba.StatusDone)
	if res, err := ws.Resume(e.ctx, touba.ResumeRequest{QueueID: running, Steps: []string{"await", "later"}, NewEffects: true}); err != nil ||
		res.From != touba.StatusDone || res.Gens["await"] != 1 || res.Gens["later"] != 1 {
		t.Fatalf("resume with new effects: %+v, %v", res, err)
	}
	e.lease(t, 10, running)
	e.finish(t, running, touba.StatusParked)
	if res, err := ws.Resume(e.ctx, touba.ResumeRequest{QueueID: running, Steps: []string{"later"}, NewEffects: true}); err != nil ||
		res.From != touba.StatusParked || res.Gens["later"] != 2 {
		t.Fatalf("second resume with new effects: %+v, %v", res, err)
	}
	if g, err := ws.EffectGens(e.ctx, running); err != nil || g["await"] != 1 || g["later"] != 2 {
		t.Fatalf("effect gens: %v, %v; want await 1, later 2", g, err)
	}
	e.wantPending(t, 1)
	// A resume does not touch the waits of the steps before it.
	if _, err := ws.Resume(e.ctx, touba.ResumeRequest{QueueID: waiting, Steps: []string{"after-nap"}}); err != nil {
		t.Fatal(err)
	}
	if w, ok := e.waitOf(t, ws, waiting, "nap"); !ok || w.State != touba.WaitWoke {
		t.Fatalf("wait of an earlier step after a resume: %+v (%v), want woke, kept", w, ok)
	}
	e.wantPending(t, 2)
}

// testResumeOffers: a resumed step's wait is gone and the offer it
// consumed goes back: the resumed run's wait takes the earliest again.
func testResumeOffers(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	a := e.waiter(t, "a", "")
	e.begin(t, ws, eventWait(a, "await", keyA, `1`, nil))
	b1 := e.offering(t, "b1", `1`, keyA).QueueID // matches a at enqueue
	e.clock.Add(time.Second)
	b2 := e.offering(t, "b2", `1`, keyA).QueueID // stored unconsumed
	e.lease(t, 10, a, b1, b2)
	if got := e.begin(t, ws, eventWait(a, "await", keyA, `1`, nil)); got.MatchedQueueID != b1 {
		t.Fatalf("wait: %+v, want matched by %s", got, b1)
	}
	e.finish(t, a, touba.StatusDone)
	if _, err := ws.Resume(e.ctx, touba.ResumeRequest{QueueID: a, Steps: []string{"await"}}); err != nil {
		t.Fatal(err)
	}
	if all, err := ws.Waits(e.ctx, a); err != nil || len(all) != 0 {
		t.Fatalf("waits after the resume: %+v, %v; want none", all, err)
	}
	e.lease(t, 10, a)
	if got := e.begin(t, ws, eventWait(a, "await", keyA, `1`, nil)); got.State != touba.WaitMatched || got.MatchedQueueID != b1 {
		t.Fatalf("resumed run's wait: %+v, want matched by %s again (its offer released)", got, b1)
	}
	// b2's offer is still there for another waiter.
	c := e.waiter(t, "c", "")
	if got := e.begin(t, ws, eventWait(c, "await", keyA, `1`, nil)); got.MatchedQueueID != b2 {
		t.Fatalf("another wait: %+v, want matched by %s", got, b2)
	}
}

func testBeginWaitLeaseLost(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	a := e.waiter(t, "a", "")
	stale := e.tok(a)
	if err := e.Queue.Postpone(e.ctx, a, stale, e.clock.Now(), "", ""); err != nil {
		t.Fatal(err)
	}
	e.lease(t, 1, a)
	_, err := ws.BeginWait(e.ctx, stale, sleepFor(a, "nap", e.clock.Now().Add(time.Hour)))
	if touba.ErrorCode(err) != touba.ELeaseLost {
		t.Fatalf("begin wait under a lost lease: %v, want %s", err, touba.ELeaseLost)
	}
	e.wantStatus(t, a, touba.StatusRunning, "")
	if all, err := ws.Waits(e.ctx, a); err != nil || len(all) != 0 {
		t.Fatalf("waits after a refused begin: %+v, %v", all, err)
	}
	// Not running at all: refused too.
	p := e.putOf(t, "trigger:a", "p", nil).QueueID
	if _, err := ws.BeginWait(e.ctx, e.tok(p), sleepFor(p, "nap", e.clock.Now())); err == nil {
		t.Fatal("begin wait of a pending entry accepted")
	}
	e.wantStatus(t, p, touba.StatusPending, "")
}

func testNextWake(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	e.wantNextWake(t, ws, nil)
	now := e.clock.Now()
	at := map[string]time.Time{}
	for i, d := range []time.Duration{3 * time.Hour, time.Hour, 2 * time.Hour} {
		id := e.waiter(t, fmt.Sprintf("w%d", i), "")
		at[id] = now.Add(d)
		e.begin(t, ws, sleepFor(id, "nap", at[id]))
	}
	noTimeout := e.waiter(t, "event", "")
	e.begin(t, ws, eventWait(noTimeout, "await", keyA, `1`, nil))
	first := now.Add(time.Hour)
	e.wantNextWake(t, ws, &first)
	// Soonest first, limit at a time.
	e.wake(t, ws, now.Add(3*time.Hour), 1, 1)
	second := now.Add(2 * time.Hour)
	e.wantNextWake(t, ws, &second)
	e.wake(t, ws, now.Add(3*time.Hour), 5, 2)
	e.wantNextWake(t, ws, nil)
	e.wantStatus(t, noTimeout, touba.StatusWaiting, "")
	e.wantPending(t, 3)
}

func testPrograms(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	if def, err := ws.Program(e.ctx, "sha-unknown"); err != nil || len(def) != 0 {
		t.Fatalf("unknown program: %q, %v", def, err)
	}
	def := []byte(`{"steps":[{"id":"s1","tool":"tool:x"}]}`)
	for range 2 {
		if err := ws.SaveProgram(e.ctx, "sha-1", def); err != nil {
			t.Fatal(err)
		}
	}
	if err := ws.SaveProgram(e.ctx, "sha-2", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	id := e.putOf(t, "trigger:a", "a", func(d *touba.Delivery) { d.ProgramDigest = "sha-1" }).QueueID
	e = e.reopen(t)
	ws = waitStore(t, e)
	if got, err := ws.Program(e.ctx, "sha-1"); err != nil || string(got) != string(def) {
		t.Fatalf("program after a restart: %q, %v", got, err)
	}
	if got := e.get(t, id); got.ProgramDigest != "sha-1" {
		t.Fatalf("entry's digest %q, want sha-1", got.ProgramDigest)
	}
	if got := e.lease(t, 1, id); got[0].ProgramDigest != "sha-1" {
		t.Fatalf("leased entry's digest %q, want sha-1", got[0].ProgramDigest)
	}
}

// testWaitingHoldsKey: a waiting entry is in progress: the next entry of
// its concurrency key waits behind it until it ends, not until it waits.
func testWaitingHoldsKey(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	keyed := func(id string) string {
		return e.putOf(t, "trigger:a", id, func(d *touba.Delivery) { d.ConcKey, d.ConcMax = `"k"`, 1 }).QueueID
	}
	k1, k2 := keyed("k1"), keyed("k2")
	e.lease(t, 10, k1)
	end := e.clock.Now().Add(time.Minute)
	e.begin(t, ws, sleepFor(k1, "nap", end))
	e.lease(t, 10) // k2 stays behind the waiting k1
	e.wantStatus(t, k2, touba.StatusPending, "")
	e.clock.Add(time.Minute)
	e.wake(t, ws, e.clock.Now(), 0, 1)
	e.lease(t, 10, k1)
	e.finish(t, k1, touba.StatusDone)
	e.lease(t, 10, k2)

	// A cancelled waiting entry lets the next one go.
	k3 := e.putOf(t, "trigger:a", "k3", func(d *touba.Delivery) {
		d.ConcKey, d.ConcMax = `"j"`, 1
		d.CancelKeys = []touba.MatchValue{{Key: cancel, Value: "1"}}
	}).QueueID
	k4 := e.putOf(t, "trigger:a", "k4", func(d *touba.Delivery) { d.ConcKey, d.ConcMax = `"j"`, 1 }).QueueID
	e.lease(t, 10, k3)
	e.begin(t, ws, eventWait(k3, "await", keyA, `1`, nil))
	e.lease(t, 10)
	e.putOf(t, "trigger:b", "b", func(d *touba.Delivery) {
		d.Cancels = []touba.MatchValue{{Key: cancel, Value: "1"}}
	})
	e.wantStatus(t, k3, touba.StatusCancelled, touba.ERunCancelled)
	e.lease(t, 10, k4, e.entryOf(t, "trigger:b", "b"))
}
