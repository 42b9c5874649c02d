package crash_test

import (
	"fmt"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// The crash points of durable steps (design of issue 25; the constants
// live in the dispatcher and in intake, the names are the contract).
const (
	cpAfterWaitBegun = "after-wait-begun" // BeginWait committed, run not ended
	cpAfterWake      = "after-wake"       // Wake committed, nothing leased
	cpAfterMatch     = "after-match"      // intake's Enqueue committed with a match, answer not sent
	cpAfterCancel    = "after-cancel"     // intake's Enqueue committed with a cancel, answer not sent
	cpAfterTick      = "after-tick"       // a tick enqueued, not yet recorded as next
)

// TestWaitCrashAfterWaitBegunSleep: the first order's run SIGKILLs the
// daemon right after its sleep began (entry waiting, nothing else done).
// After a restart the sleep ends once, the write is not repeated and
// confirm runs once.
func TestWaitCrashAfterWaitBegunSleep(t *testing.T) {
	t.Parallel()
	prog := waitProg{nap: napMS(700)}
	w := newWaitWorld(t, touba.RetryNone, prog)
	w.intakeOrders(nil, false)
	log := w.crashBy(cpAfterWaitBegun, 1, "an order done", anyOrder(touba.StatusDone))

	ev, qid := w.firstOrder()
	w.checkFirstAtCrash(ev, qid, touba.StatusWaiting, log)
	x := w.waitsOf(qid)[qid][stepNap]
	if x.Kind != touba.WaitSleep || x.State != touba.WaitOpen || x.WakeAt == nil {
		t.Fatalf("at the crash, %s's nap is %s, want an open sleep with a wake_at\n%s", ev, waitString(x), log)
	}
	w.finish(prog, allDone(), nil)
}

// TestWaitCrashAfterWaitBegunEvent: the same with a wait for the payment
// (open, the payment not yet sent); after the restart the payments come
// and release each order once.
func TestWaitCrashAfterWaitBegunEvent(t *testing.T) {
	t.Parallel()
	prog := waitProg{paid: true}
	w := newWaitWorld(t, touba.RetryNone, prog)
	w.intakeOrders(nil, false)
	log := w.crashBy(cpAfterWaitBegun, 1, "every order waiting", allStatus(allOrders(), touba.StatusWaiting))

	ev, qid := w.firstOrder()
	w.checkFirstAtCrash(ev, qid, touba.StatusWaiting, log)
	x := w.waitsOf(qid)[qid][stepPaid]
	key := touba.WaitKeyOf("trigger:crash/Orders", stepPaid, "trigger:crash/Payments", "/body/order_id")
	if x.Kind != touba.WaitEvent || x.State != touba.WaitOpen || x.Key != key || x.Value != fmt.Sprintf("%q", orderID(1)) {
		t.Fatalf("at the crash, %s's paid wait is %s key %q value %q, want open on %q = %q\n%s", ev, waitString(x), x.Key, x.Value,
			key, fmt.Sprintf("%q", orderID(1)), log)
	}
	w.finish(prog, allDone(), w.sendPayments)
}

// TestWaitCrashAfterWaitBegunOffer: the payments were accepted before
// the orders ran, so the first order's BeginWait consumes its payment's
// offer and the run goes on (entry running); the daemon dies there. After
// the restart the run re-reaches the step, finds the wait matched, and no
// payment is consumed twice.
func TestWaitCrashAfterWaitBegunOffer(t *testing.T) {
	t.Parallel()
	prog := waitProg{paid: true}
	w := newWaitWorld(t, touba.RetryNone, prog)
	w.intakeOrders(nil, true)
	log := w.crashBy(cpAfterWaitBegun, 1, "an order done past its matched wait", anyOrder(touba.StatusDone))

	ev, qid := w.firstOrder()
	w.checkFirstAtCrash(ev, qid, touba.StatusRunning, log)
	pay := paymentEvent(1)
	if x := w.waitsOf(qid)[qid][stepPaid]; x.State != touba.WaitMatched || x.MatchedQueueID != w.qid(pay) {
		t.Fatalf("at the crash, %s's paid wait is %s, want matched by the offer of %s (%s)\n%s", ev, waitString(x), pay, w.qid(pay), log)
	}
	w.finish(prog, allDone(), nil)
}

// TestWaitCrashAfterWake: three orders sleep; the daemon dies right after
// Wake committed (the woken entries pending, their sleeps woke, nothing
// leased). After a restart each runs its confirm once; no sleep ends
// twice, no write is repeated.
func TestWaitCrashAfterWake(t *testing.T) {
	t.Parallel()
	prog := waitProg{nap: napMS(600)}
	w := newWaitWorld(t, touba.RetryNone, prog)
	w.intakeOrders(nil, false)
	log := w.crashBy(cpAfterWake, waitOrders, "an order done past its sleep", anyOrder(touba.StatusDone))

	entries := w.liveEntries()
	var qids []string
	for _, o := range allOrders() {
		qids = append(qids, w.qid(o))
	}
	woken := 0
	for qid, ws := range w.waitsOf(qids...) {
		e := entries[qid]
		if e.Status == touba.StatusDone {
			t.Errorf("at the crash, %s is done: every run passes a wake first", e.EventID)
		}
		nap, ok := ws[stepNap]
		if !ok || nap.State != touba.WaitWoke {
			continue
		}
		woken++
		// Pending, or running: the lease loop polls on its own, and on
		// SQLite its lease may share the writer's next commit with the
		// wake, before the crash point is reached.
		if e.Status != touba.StatusPending && e.Status != touba.StatusRunning {
			t.Errorf("at the crash, %s's nap woke (%s) but it is %s, want pending or running", e.EventID, waitString(nap), e.Status)
		}
	}
	if woken == 0 {
		t.Errorf("at the crash, no order's nap woke")
	}
	if t.Failed() {
		t.Fatalf("the files do not show the crash after a wake\n%s", log)
	}
	w.finish(prog, allDone(), nil)
}

// TestWaitCrashAfterMatch: the orders wait for their payments; the daemon
// dies after committing the first payment, which matched the first
// order's wait, and before answering it. After a restart the sender sends
// the payment again: it names the same entry, nothing matches twice, and
// the order confirms once with that payment.
func TestWaitCrashAfterMatch(t *testing.T) {
	t.Parallel()
	prog := waitProg{paid: true}
	w := newWaitWorld(t, touba.RetryNone, prog)
	w.intakeOrders(nil, false)
	w.untilAll(touba.StatusWaiting, allOrders()...)

	pay := paymentEvent(1)
	w.crashWhile(cpAfterMatch, func(d *testkit.Daemon) error {
		_, _, err := w.post(d, paymentsPath, pay, orderID(1), orderRefBody(1))
		return err
	})
	entries := w.liveEntries()
	p := entryByEvent(entries, pay)
	if p == nil {
		t.Fatalf("at the crash, payment %s is not in the queue: after-match comes after the commit", pay)
	}
	qid := w.qid(orderEvent(1))
	x := w.waitsOf(qid)[qid][stepPaid]
	if e := entries[qid]; e.Status != touba.StatusPending || x.State != touba.WaitMatched || x.MatchedQueueID != p.QueueID {
		t.Fatalf("at the crash, %s is %s with wait %s, want pending with its wait matched by %s", orderEvent(1), e.Status, waitString(x), p.QueueID)
	}
	for _, o := range allOrders()[1:] {
		if e := entryByEvent(entries, o); e.Status != touba.StatusWaiting {
			t.Errorf("at the crash, %s is %s, want still waiting", o, e.Status)
		}
	}
	w.finish(prog, allDone(), func(d *testkit.Daemon) {
		if got := w.qid(pay); got != p.QueueID {
			t.Errorf("the resent %s names %s, the committed entry is %s", pay, got, p.QueueID)
		}
		w.sendPayments(d)
	})
}

// TestWaitCrashAfterCancel: the first order sleeps for ten minutes, the
// others briefly; the daemon dies after committing the first order's
// refund, which cancelled it, and before answering. After a restart the
// refund is sent again and names the same entry; the first order stays
// cancelled (its sleep cancelled, confirm never run), the others finish.
func TestWaitCrashAfterCancel(t *testing.T) {
	t.Parallel()
	prog := waitProg{nap: napUntil, cancel: true}
	w := newWaitWorld(t, touba.RetryNone, prog)
	start := time.Now()
	w.intakeOrders(func(n int) time.Time {
		if n == 1 {
			return start.Add(10 * time.Minute)
		}
		return start.Add(time.Second)
	}, false)
	w.untilAll(touba.StatusWaiting, orderEvent(1))

	ref := refundEvent(1)
	w.crashWhile(cpAfterCancel, func(d *testkit.Daemon) error {
		_, _, err := w.post(d, refundsPath, ref, orderID(1), orderRefBody(1))
		return err
	})
	entries := w.liveEntries()
	r := entryByEvent(entries, ref)
	if r == nil {
		t.Fatalf("at the crash, refund %s is not in the queue: after-cancel comes after the commit", ref)
	}
	qid := w.qid(orderEvent(1))
	x := w.waitsOf(qid)[qid][stepNap]
	if e := entries[qid]; e.Status != touba.StatusCancelled || e.ErrorCode != touba.ERunCancelled || x.State != touba.WaitCancelled {
		t.Fatalf("at the crash, %s is %s (%s) with nap %s, want cancelled (%s) with its sleep cancelled",
			orderEvent(1), e.Status, e.ErrorCode, waitString(x), touba.ERunCancelled)
	}
	want := allDone()
	want[orderEvent(1)] = orderEnd{status: touba.StatusCancelled}
	w.finish(prog, want, func(*testkit.Daemon) {
		if got := w.qid(ref); got != r.QueueID {
			t.Errorf("the resent %s names %s, the committed entry is %s", ref, got, r.QueueID)
		}
	})
}
