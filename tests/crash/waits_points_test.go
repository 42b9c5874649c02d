package crash_test

import (
	"fmt"
	"os"
	"os/exec"
	"sort"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
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

// waitOrders is how many orders each crash-point scenario sends.
const waitOrders = 3

// allOrders are the event ids of orders 1..waitOrders.
func allOrders() []string {
	var out []string
	for n := 1; n <= waitOrders; n++ {
		out = append(out, orderEvent(n))
	}
	return out
}

// intakeOrders acknowledges orders 1..waitOrders (order n sleeping until
// napUntil(n) when given) and, with payments, their payments after them,
// with an intake-only daemon stopped cleanly: all are on disk and pending
// before the daemon that will crash starts.
func (w *waitWorld) intakeOrders(napUntil func(n int) time.Time, payments bool) {
	w.t.Helper()
	d := testkit.Start(w.t, nil, w.args("--workers", "0")...)
	for n := 1; n <= waitOrders; n++ {
		var until time.Time
		if napUntil != nil {
			until = napUntil(n)
		}
		w.mustPost(d, ordersPath, orderEvent(n), orderID(n), orderBody(n, until))
	}
	if payments {
		for n := 1; n <= waitOrders; n++ {
			w.mustPost(d, paymentsPath, paymentEvent(n), orderID(n), orderRefBody(n))
		}
	}
	stop(w.t, d)
}

// firstOrder is the order a single worker leases first (queue id order).
func (w *waitWorld) firstOrder() (eventID, qid string) {
	ids := map[string]string{}
	var qids []string
	for _, ev := range allOrders() {
		ids[w.qid(ev)] = ev
		qids = append(qids, w.qid(ev))
	}
	sort.Strings(qids)
	return ids[qids[0]], qids[0]
}

// allDone is want for orders all done, each paid by its own payment.
func allDone() map[string]orderEnd {
	want := map[string]orderEnd{}
	for n := 1; n <= waitOrders; n++ {
		want[orderEvent(n)] = orderEnd{status: touba.StatusDone, paidBy: paymentEvent(n)}
	}
	return want
}

// finish restarts after the crash, sends what the scenario still owes
// (then), resends what the crash left unanswered, waits until every entry
// ended, stops cleanly and checks.
func (w *waitWorld) finish(prog waitProg, want map[string]orderEnd, then func(d *testkit.Daemon)) {
	w.t.Helper()
	d := w.restart(2)
	w.resendAll(d)
	if then != nil {
		then(d)
	}
	w.waitEntries("every entry ended", settledEntries)
	stop(w.t, d)
	w.checkWaits(prog, want)
}

// sendPayments posts the payment of every order.
func (w *waitWorld) sendPayments(d *testkit.Daemon) {
	for n := 1; n <= waitOrders; n++ {
		w.mustPost(d, paymentsPath, paymentEvent(n), orderID(n), orderRefBody(n))
	}
}

// crashWhile starts the daemon with point armed and no workers (intake
// only: nothing else can move while the test acts), runs act against it,
// which must make the daemon SIGKILL itself before it answers, and waits
// for that.
func (w *waitWorld) crashWhile(point string, act func(d *testkit.Daemon) error) {
	w.t.Helper()
	d := testkit.Start(w.t, []string{crashpoint.Env + "=" + point}, w.args("--workers", "0", "--take-over-stale-lock")...)
	if err := act(d); err == nil {
		w.t.Fatalf("crash point %s: the request was answered; the daemon must die after its commit and before its answer\n%s", point, d.Log())
	}
	d.Wait(60 * time.Second)
	if ws, ok := d.Cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		w.t.Fatalf("crash point %s: daemon ended with %v, want killed by SIGKILL\n%s", point, d.Cmd.ProcessState, d.Log())
	}
}

// crashBy is world.crash for the crash points of durable steps, failing
// fast where a point is missing: it runs the daemon armed with point and
// workers workers until it SIGKILLs itself, and fails the test, saying the
// point never fired, once passed holds of the entries while it still runs
// (the flow went past the point alive).
func (w *waitWorld) crashBy(point string, workers int, what string, passed func(map[string]*touba.Delivery) bool) string {
	w.t.Helper()
	cmd := exec.Command(testkit.Binary(w.t), w.args("--workers", fmt.Sprint(workers), "--take-over-stale-lock")...)
	cmd.Env = append(os.Environ(), crashpoint.Env+"="+point)
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for alive := true; alive; {
		select {
		case <-exited:
			alive = false
		case <-time.After(25 * time.Millisecond):
			// The queue exists once the daemon migrated it.
			if _, err := os.Stat(w.queue); w.db == "" && err != nil {
				continue
			}
			if !passed(w.liveEntries()) && time.Now().Before(deadline) {
				continue
			}
			select {
			case <-exited: // it was dying
				alive = false
			case <-time.After(2 * time.Second):
				cmd.Process.Kill()
				<-exited
				w.t.Fatalf("crash point %s never fired: %s with the daemon still running\n%s", point, what, log.String())
			}
		}
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		w.t.Fatalf("crash point %s: daemon ended with %v, want killed by SIGKILL\n%s", point, cmd.ProcessState, log.String())
	}
	return log.String()
}

// anyOrder is a crashBy condition: some order is in status.
func anyOrder(status string) func(map[string]*touba.Delivery) bool {
	return func(entries map[string]*touba.Delivery) bool {
		for _, o := range allOrders() {
			if e := entryByEvent(entries, o); e != nil && e.Status == status {
				return true
			}
		}
		return false
	}
}

// untilAll runs the daemon (2 workers) until every order is in status,
// then stops it cleanly.
func (w *waitWorld) untilAll(status string, orders ...string) {
	w.t.Helper()
	d := testkit.Start(w.t, nil, w.args("--workers", "2", "--take-over-stale-lock")...)
	w.waitEntries(fmt.Sprintf("orders %v %s", orders, status), allStatus(orders, status))
	stop(w.t, d)
}

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
	if x.Kind != touba.WaitEvent || x.State != touba.WaitOpen || x.Key != touba.WaitKey("trigger:crash/Orders", stepPaid) || x.Value != fmt.Sprintf("%q", orderID(1)) {
		t.Fatalf("at the crash, %s's paid wait is %s key %q value %q, want open on %q = %q\n%s", ev, waitString(x), x.Key, x.Value,
			touba.WaitKey("trigger:crash/Orders", stepPaid), fmt.Sprintf("%q", orderID(1)), log)
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

// checkFirstAtCrash checks the files right after a crash in the first
// order's run at a wait step: that order is in status, its write applied
// and written once, confirm not started; the other orders untouched.
func (w *waitWorld) checkFirstAtCrash(ev, qid, status, log string) {
	t := w.t
	t.Helper()
	entries := w.liveEntries()
	for _, o := range allOrders() {
		e, want := entryByEvent(entries, o), touba.StatusPending
		if o == ev {
			want = status
		}
		if e == nil || e.Status != want {
			t.Errorf("at the crash, order %s is %v, want %s", o, e, want)
		}
	}
	effects, _ := w.effects()
	lines := w.remoteLines()
	if eff := effects[effectID(qid, stepWrite)]; eff.State != touba.EffectApplied || len(lines) != 1 {
		t.Errorf("at the crash, %s's write is %q and the remote saw %d requests, want applied and 1: %v", ev, eff.State, len(lines), lines)
	}
	if _, ok := effects[effectID(qid, stepConfirm)]; ok {
		t.Errorf("at the crash, %s's confirm is journaled: the run went past its wait", ev)
	}
	if t.Failed() {
		t.Fatalf("the files do not show the crash at the wait step\n%s", log)
	}
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
		if e.Status != touba.StatusPending {
			t.Errorf("at the crash, %s's nap woke (%s) but it is %s, want pending: nothing is leased before the crash", e.EventID, waitString(nap), e.Status)
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
