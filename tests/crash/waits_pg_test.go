package crash_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/trigger"
)

// Durable steps on PostgreSQL (SPEC §2.3, §8): a waiting entry has no
// lease, so a dead node's sleepers wake on another node; ticks are one
// entry each across nodes; and a wait and an offer of one (key, value)
// never miss each other, nor is one offer consumed twice, whichever nodes
// they commit on.

// newPGWaitWorld is newWaitWorld on a fresh database (newPGWorld).
func newPGWaitWorld(t *testing.T, retryMode string, prog fmt.Stringer) *waitWorld {
	t.Helper()
	if ok, why := pgtest.Available(); !ok {
		t.Skip("PostgreSQL 15 not installed: " + why)
	}
	w := &waitWorld{world: newPGWorld(t, retryMode, oneShotKind), sent: map[string]sentDelivery{}}
	w.setProgram(prog)
	return w
}

// sleepersWake is how long after their acknowledgement the sleepers of
// TestWaitPGSleepersWakeElsewhere wake: time for node A to run their
// writes on a loaded machine, and for the test to kill it.
const sleepersWake = 6 * time.Second

// node starts a node of the cluster with workers workers.
func (w *waitWorld) node(name string, workers int) *testkit.Daemon {
	w.t.Helper()
	return testkit.Start(w.t, nil, w.args("--workers", fmt.Sprint(workers), "--node-id", name)...)
}

// TestWaitPGSleepersWakeElsewhere: node A runs three orders up to their
// sleep (until one time, a few seconds on, so that all sleep at once
// however slow the machine) and is SIGKILLed while they sleep; node B,
// started after, wakes them when their time comes (no lease of A's to
// expire: a waiting entry has none) and runs their confirm; each write
// once.
func TestWaitPGSleepersWakeElsewhere(t *testing.T) {
	t.Parallel()
	prog := waitProg{nap: napUntil}
	w := newPGWaitWorld(t, touba.RetryNone, prog)
	a := w.node(crashed, 2)
	until := time.Now().Add(sleepersWake)
	for n := 1; n <= waitOrders; n++ {
		w.mustPost(a, ordersPath, orderEvent(n), orderID(n), orderBody(n, until))
	}
	w.waitEntries("the orders asleep on node A", allStatus(allOrders(), touba.StatusWaiting))
	a.Kill()
	if time.Now().After(until) {
		t.Fatalf("node A took over %v to put the orders to sleep: the test cannot tell which node woke them", sleepersWake)
	}
	for _, o := range allOrders() {
		if e := entryByEvent(w.liveEntries(), o); e.Status != touba.StatusWaiting || e.LeaseOwner != "" {
			t.Fatalf("after node A died, %s is %s leased by %q, want waiting with no lease", o, e.Status, e.LeaseOwner)
		}
	}

	b := w.node(survivor, 2)
	entries := w.waitEntries("the orders finished on node B", settledEntries)
	stop(t, b)
	for _, o := range allOrders() {
		if e := entryByEvent(entries, o); e.Node != survivor {
			t.Errorf("%s last ran on node %q, want %s", o, e.Node, survivor)
		}
	}
	w.checkWaits(prog, allDone())
}

// TestWaitPGTicksOncePerTick: two nodes start at once on a schedule with
// thirty missed minutes to catch up (catch_up "all"), racing each other
// through the same ticks. Every minute is one entry, run once.
func TestWaitPGTicksOncePerTick(t *testing.T) {
	t.Parallel()
	w := newPGWaitWorld(t, touba.RetryNone, tickProg{})
	const missed = 30
	seed := time.Now().UTC().Truncate(time.Minute).Add(-missed * time.Minute)
	st := w.pgStore()
	body := trigger.TickBody(seed)
	if _, err := st.Queue.Enqueue(context.Background(), &touba.Delivery{TriggerRef: ticksRef, EventID: trigger.TickEventID(seed),
		Digest: dedupe.Digest(body), Body: body, Headers: map[string]string{}, ReceivedAt: seed}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	// Both processes start before either listens, so their catch-ups
	// overlap.
	nodes := make([]*testkit.Daemon, 2)
	var wg sync.WaitGroup
	for i, name := range []string{crashed, survivor} {
		wg.Add(1)
		go func() { defer wg.Done(); nodes[i] = w.node(name, 2) }()
	}
	wg.Wait()
	if nodes[0] == nil || nodes[1] == nil {
		t.FailNow() // a start failed and said why
	}
	// The catch-up is the race: both nodes enqueue the same ticks at the
	// same moment, as two nodes whose clocks reach a tick do, through the
	// same EnqueueTick; waiting for the next minute's live tick as well
	// would cost up to a minute for no other path.
	last := seed.Add(missed * time.Minute)
	w.waitEntries("the ticks up to "+trigger.TickEventID(last)+" enqueued and run", func(entries map[string]*touba.Delivery) bool {
		return entryByEvent(entries, trigger.TickEventID(last)) != nil && settledEntries(entries)
	})
	for _, d := range nodes {
		stop(t, d)
	}
	checkTicks(t, w.world, seed, w.liveEntries())
}

// twinEvent is the second order of order n's order id.
func twinEvent(n int) string { return orderEvent(n) + "-twin" }

// secondPayment is the second payment of order n's order id.
func secondPayment(n int) string { return paymentEvent(n) + "-2" }

// TestWaitPGTwoWaitsOneValue: two orders with the same order id, one
// accepted by each node, both wait at step paid for that id; one payment
// is consumed by exactly one of the waits (the earlier one) while the
// other keeps waiting; a second payment releases the other. Each confirm
// saw its own payment, and no payment matched twice.
func TestWaitPGTwoWaitsOneValue(t *testing.T) {
	t.Parallel()
	prog := waitProg{paid: true}
	w := newPGWaitWorld(t, touba.RetryNone, prog)
	a, b := w.node(crashed, 2), w.node(survivor, 2)
	w.mustPost(a, ordersPath, orderEvent(1), orderID(1), orderBody(1, time.Time{}))
	w.mustPost(b, ordersPath, twinEvent(1), orderID(1), orderBody(1, time.Time{}))
	both := []string{orderEvent(1), twinEvent(1)}
	w.waitEntries("both orders waiting", allStatus(both, touba.StatusWaiting))
	qids := []string{w.qid(orderEvent(1)), w.qid(twinEvent(1))}
	waits := w.waitsOf(qids...)
	earlier, later := 0, 1
	if x, y := waits[qids[0]][stepPaid], waits[qids[1]][stepPaid]; y.CreatedAt.Before(x.CreatedAt) ||
		y.CreatedAt.Equal(x.CreatedAt) && qids[1] < qids[0] {
		earlier, later = 1, 0
	}

	pay := w.mustPost(a, paymentsPath, paymentEvent(1), orderID(1), orderRefBody(1))
	entries := w.waitEntries("the earlier wait's order done", allStatus(both[earlier:earlier+1], touba.StatusDone))
	if e := entries[qids[later]]; e.Status != touba.StatusWaiting {
		t.Fatalf("one payment released both waits: %s is %s", both[later], e.Status)
	}
	waits = w.waitsOf(qids...)
	if x := waits[qids[earlier]][stepPaid]; x.State != touba.WaitMatched || x.MatchedQueueID != pay {
		t.Fatalf("%s's wait is %s, want matched by %s", both[earlier], waitString(x), pay)
	}
	if x := waits[qids[later]][stepPaid]; x.State != touba.WaitOpen {
		t.Fatalf("%s's wait is %s, want still open", both[later], waitString(x))
	}

	w.mustPost(b, paymentsPath, secondPayment(1), orderID(1), orderRefBody(1))
	w.waitEntries("every entry ended", settledEntries)
	stop(t, a)
	stop(t, b)
	w.checkWaits(prog, map[string]orderEnd{
		both[earlier]: {status: touba.StatusDone, paidBy: paymentEvent(1)},
		both[later]:   {status: touba.StatusDone, paidBy: secondPayment(1)},
	})
}

// TestWaitPGOfferRacesWait: orders accepted on node A, each paid on node
// B a few milliseconds after its acknowledgement, so that a payment's
// enqueue and its order's BeginWait often commit at the same moment on
// two nodes. A wait and an offer of one (key, value) must never miss
// each other: every order ends done with its own payment. (With the
// advisory locks of BeginWait and Enqueue taken away, 4 runs in 4 left
// some wait open beside its unconsumed offer; 2 in 5 with 40 orders.)
func TestWaitPGOfferRacesWait(t *testing.T) {
	t.Parallel()
	const orders, senders = 80, 8
	prog := waitProg{paid: true}
	w := newPGWaitWorld(t, touba.RetryNone, prog)
	a, b := w.node(crashed, 4), w.node(survivor, 4)
	var wg sync.WaitGroup
	work := make(chan int)
	for s := 0; s < senders; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				if _, ok, err := w.post(a, ordersPath, orderEvent(n), orderID(n), orderBody(n, time.Time{})); !ok {
					t.Errorf("order %d: %v", n, err)
					continue
				}
				// Spread the payments over the window in which the run
				// reaches its wait (the write's handler call).
				time.Sleep(time.Duration(n%8) * 5 * time.Millisecond) // simulated work: the sender's pace
				if _, ok, err := w.post(b, paymentsPath, paymentEvent(n), orderID(n), orderRefBody(n)); !ok {
					t.Errorf("payment %d: %v", n, err)
				}
			}
		}()
	}
	for n := 1; n <= orders; n++ {
		work <- n
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	w.waitSettledOrReport(30 * time.Second)
	stop(t, a)
	stop(t, b)
	want := map[string]orderEnd{}
	for n := 1; n <= orders; n++ {
		want[orderEvent(n)] = orderEnd{status: touba.StatusDone, paidBy: paymentEvent(n)}
	}
	w.checkWaits(prog, want)
}

// waitSettledOrReport waits until every entry ended; past timeout it
// fails naming each entry still waiting and its waits: a wait left open
// although its payment was accepted is the miss the advisory lock
// prevents.
func (w *waitWorld) waitSettledOrReport(timeout time.Duration) {
	w.t.Helper()
	var entries map[string]*touba.Delivery
	// Each look opens a database session: a slower poll than
	// testkit.WaitFor's leaves the nodes their machine.
	testkit.WaitForReport(w.t, timeout, testkit.Every(20*time.Millisecond, func() bool {
		entries = w.liveEntries()
		return settledEntries(entries)
	}), "every entry to end", func() {
		for qid, e := range entries {
			if e.Status == touba.StatusDone {
				continue
			}
			var n int
			fmt.Sscanf(e.EventID, "order-%d", &n)
			for _, x := range w.waitsOf(qid)[qid] {
				w.t.Errorf("%s is %s after %v, its wait %s; its payment %s was acknowledged as %s",
					e.EventID, e.Status, timeout, waitString(x), paymentEvent(n), w.qid(paymentEvent(n)))
			}
			if len(w.waitsOf(qid)[qid]) == 0 {
				w.t.Errorf("%s is %s after %v", e.EventID, e.Status, timeout)
			}
		}
	})
}
