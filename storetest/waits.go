package storetest

import (
	"fmt"
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
	t.Run("OffersInAcceptanceOrder", func(t *testing.T) { testOffersInAcceptanceOrder(t, f) })
	t.Run("OfferConsumedOncePerKey", func(t *testing.T) { testOfferOncePerKey(t, f) })
	t.Run("OffersAndWaitsRace", func(t *testing.T) { testOfferRace(t, f) })
	t.Run("Timeout", func(t *testing.T) { testWaitTimeout(t, f) })
	t.Run("CancelPendingWaitingRunning", func(t *testing.T) { testCancel(t, f) })
	t.Run("CancelRequestedTransitions", func(t *testing.T) { testCancelRequested(t, f) })
	t.Run("ReplayCancelledWaitsAgain", func(t *testing.T) { testReplayCancelled(t, f) })
	t.Run("Resume", func(t *testing.T) { testResume(t, f) })
	t.Run("ResumeReleasesOffers", func(t *testing.T) { testResumeOffers(t, f) })
	t.Run("BeginWaitLostLease", func(t *testing.T) { testBeginWaitLeaseLost(t, f) })
	t.Run("BeginWaitKeyTooLong", func(t *testing.T) { testBeginWaitKeyTooLong(t, f) })
	t.Run("NextWakeAndLimit", func(t *testing.T) { testNextWake(t, f) })
	t.Run("Programs", func(t *testing.T) { testPrograms(t, f) })
	t.Run("WaitingHoldsItsKey", func(t *testing.T) { testWaitingHoldsKey(t, f) })
	t.Run("CancelSurvivesPark", func(t *testing.T) { testCancelSurvivesPark(t, f) })
	t.Run("CancelWhileParked", func(t *testing.T) { testCancelWhileParked(t, f) })
	t.Run("Repin", func(t *testing.T) { testRepin(t, f) })
	t.Run("ParkStranded", func(t *testing.T) { testParkStranded(t, f) })
	t.Run("ReplayTimedOutTakesALateOffer", func(t *testing.T) { testReplayTimedOut(t, f) })
	t.Run("OfferOutlivesRetention", func(t *testing.T) { testOfferOutlivesRetention(t, f) })
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
