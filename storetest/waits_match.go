package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Event waits (wait_for, SPEC §2.3): a wait is matched by a delivery of the
// awaited trigger accepted after it began (the earliest open wait first)
// or before (the earliest offer no wait of its key consumed), at most once
// per offer and key, or ends timed_out.

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

// testOffersInAcceptanceOrder: the earliest offer is the one accepted
// first, whatever the deliveries' received_at say (a slow request, or a
// sender's clock, may make a later acceptance the earlier receipt).
func testOffersInAcceptanceOrder(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	b1 := e.offering(t, "b1", `"o1"`, keyA).QueueID
	e.clock.Add(time.Second)
	b2 := e.putOf(t, "trigger:b", "b2", func(d *touba.Delivery) {
		d.ReceivedAt = e.clock.Now().Add(-time.Hour)
		d.Offers = []touba.MatchValue{{Key: keyA, Value: `"o1"`}}
	}).QueueID
	e.lease(t, 10, b1, b2)
	for i, want := range []string{b1, b2} {
		w := e.waiter(t, fmt.Sprintf("w%d", i), "")
		if got := e.begin(t, ws, eventWait(w, "await", keyA, `"o1"`, nil)); got.State != touba.WaitMatched || got.MatchedQueueID != want {
			t.Fatalf("wait %d: %+v, want matched by %s (accepted %s)", i, got, want, []string{"first", "second"}[i])
		}
		e.finish(t, w, touba.StatusDone)
	}
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

// testReplayTimedOut: an entry failed WaitTimedOut, replayed after the
// awaited delivery arrived late, waits anew and takes that delivery at
// once, instead of reading the timeout again (issue 33).
func testReplayTimedOut(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	a := e.waiter(t, "a", "")
	timeout := e.clock.Now().Add(10 * time.Minute)
	e.begin(t, ws, eventWait(a, "await", keyA, `1`, &timeout))
	e.clock.Add(10 * time.Minute)
	e.wake(t, ws, e.clock.Now(), 0, 1)
	e.lease(t, 1, a)
	if got := e.begin(t, ws, eventWait(a, "await", keyA, `1`, &timeout)); got.State != touba.WaitTimedOut {
		t.Fatalf("re-run's wait: %+v, want timed_out", got)
	}
	if err := e.Queue.Finish(e.ctx, a, e.tok(a), touba.StatusFailed, touba.EWaitTimedOut, "timed out"); err != nil {
		t.Fatal(err)
	}
	late := e.offering(t, "late", `1`, keyA).QueueID
	if res, err := e.Queue.Replay(e.ctx, []string{a}, touba.ReplayOptions{}); err != nil || len(res) != 1 || res[0].To != touba.StatusPending {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	e.lease(t, 10, a, late)
	next := e.clock.Now().Add(10 * time.Minute)
	if got := e.begin(t, ws, eventWait(a, "await", keyA, `1`, &next)); got.State != touba.WaitMatched || got.MatchedQueueID != late {
		t.Fatalf("replayed entry's wait: %+v, want matched by the late delivery %s", got, late)
	}
}

// testOfferOutlivesRetention: a done delivery's offer not yet consumed is
// kept, body and all, past --retention while an entry of the awaiting
// trigger is unfinished (it may still reach its wait_for, SPEC §2.3); its
// wait then takes it, body included. Once no entry of that trigger is
// unfinished, the body goes as any.
func testOfferOutlivesRetention(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	ws := waitStore(t, e)
	sleeper := e.waiter(t, "sleeper", "")
	later := e.clock.Now().Add(72 * time.Hour)
	e.begin(t, ws, sleepFor(sleeper, "nap", later))
	offer := e.offering(t, "early", `1`, keyA).QueueID
	e.lease(t, 1, offer)
	e.finish(t, offer, touba.StatusDone)
	plain := e.putOf(t, "trigger:b", "plain", nil).QueueID
	e.lease(t, 1, plain)
	e.finish(t, plain, touba.StatusDone)
	e.clock.Add(48 * time.Hour)
	if n, err := e.Queue.PurgeBodies(e.ctx, e.clock.Now().Add(-24*time.Hour)); err != nil || n != 1 {
		t.Fatalf("purged %d (%v), want 1: the plain delivery, not the one whose offer a sleeper may take", n, err)
	}
	if got := e.get(t, offer); len(got.Body) == 0 {
		t.Fatalf("the offering delivery lost its body while an entry of the awaiting trigger is unfinished")
	}
	e.clock.Add(48 * time.Hour)
	e.wake(t, ws, e.clock.Now(), 0, 1)
	e.lease(t, 1, sleeper)
	if got := e.begin(t, ws, eventWait(sleeper, "await", keyA, `1`, nil)); got.State != touba.WaitMatched || got.MatchedQueueID != offer {
		t.Fatalf("the sleeper's wait: %+v, want matched by %s", got, offer)
	}
	e.finish(t, sleeper, touba.StatusDone)
	if n, err := e.Queue.PurgeBodies(e.ctx, e.clock.Now().Add(-24*time.Hour)); err != nil || n != 1 {
		t.Fatalf("purged %d (%v), want 1 once its offer is consumed", n, err)
	}
}
