package crash_test

import (
	"fmt"
	"os"
	"os/exec"
	"sort"
	"syscall"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/internal/testkit"
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
