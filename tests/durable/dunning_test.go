package durable_test

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// reminderOf reads the reminder number of a SendReminder call.
func reminderOf(t *testing.T, c call) int {
	t.Helper()
	var in struct {
		Reminder int `json:"reminder"`
	}
	if err := json.Unmarshal(c.Input, &in); err != nil {
		t.Fatalf("SendReminder input %s: %v", c.Input, err)
	}
	return in.Reminder
}

// waitSleeping waits until entry qid sleeps in step and returns the wait.
func (w *world) waitSleeping(qid, step string) touba.Wait {
	w.t.Helper()
	e := w.waitShow(qid, qid+" to sleep in "+step, func(e shown) bool {
		if e.Status != touba.StatusWaiting {
			return false
		}
		for _, wt := range e.Waits {
			if wt.QueueID == qid && wt.StepID == step && wt.State == touba.WaitOpen {
				return true
			}
		}
		return false
	})
	wt := e.wait(w.t, step)
	if wt.Kind != touba.WaitSleep || wt.WakeAt == nil {
		w.t.Fatalf("%s's wait in %s: %+v, want an open sleep with a wake time", qid, step, wt)
	}
	return wt
}

// TestDunningCancelledByPayment: flow (b). Two invoices start dunning; the
// first is paid while it sleeps: its entry ends cancelled (RunCancelled),
// its sleep cancelled, and no later reminder is sent, while the unpaid one,
// whose sleep ends no later, gets all three reminders.
func TestDunningCancelledByPayment(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(p program) { p.sleeps(3*time.Second, 500*time.Millisecond) })
	w.start()
	paid := w.post(refInvoice, "", invoiceFailedBody("evt_if_1", "in_1"))
	unpaid := w.post(refInvoice, "", invoiceFailedBody("evt_if_2", "in_2"))
	w.waitSleeping(paid, "wait_1")
	w.waitSleeping(unpaid, "wait_1")
	if c := w.once("remind", paid); reminderOf(t, c) != 1 {
		t.Fatalf("first call for the paid invoice: %+v", c)
	}

	p := w.post(refPaid, "", invoicePaidBody("evt_ip_1", "in_1"))
	ec := w.waitStatus(paid, touba.StatusCancelled)
	if ec.ErrorCode != touba.ERunCancelled {
		t.Fatalf("the paid invoice's dunning ended %s %s (%s), want RunCancelled", ec.Status, ec.ErrorCode, ec.ErrorMessage)
	}
	if !strings.Contains(ec.ErrorMessage, p) && !strings.Contains(ec.ErrorMessage, "evt_ip_1") {
		t.Fatalf("the cancellation message %q names neither the paying delivery %s nor its event", ec.ErrorMessage, p)
	}
	if wt := ec.wait(t, "wait_1"); wt.State != touba.WaitCancelled {
		t.Fatalf("the paid invoice's sleep: %+v, want cancelled", wt)
	}
	w.waitStatus(p, touba.StatusDone)

	// The unpaid invoice's sleep began after the paid one's: once it has
	// sent its last reminder, the paid one's sleep ended long ago.
	w.waitStatus(unpaid, touba.StatusDone)
	cs := w.callsOf("remind", unpaid)
	if len(cs) != 3 || reminderOf(t, cs[0]) != 1 || reminderOf(t, cs[1]) != 2 || reminderOf(t, cs[2]) != 3 {
		t.Fatalf("the unpaid invoice's reminders: %+v, want 1, 2, 3 once each", cs)
	}
	if c := w.once("remind", paid); reminderOf(t, c) != 1 {
		t.Fatalf("the paid invoice got %+v, want only its first reminder", c)
	}
	if e := w.show(paid); e.Status != touba.StatusCancelled {
		t.Fatalf("the paid invoice's entry is %s, want still cancelled", e.Status)
	}

	// A payment after the dunning completed changes nothing.
	w.post(refPaid, "", invoicePaidBody("evt_ip_2", "in_2"))
	if e := w.show(unpaid); e.Status != touba.StatusDone {
		t.Fatalf("the completed dunning is %s after a late payment, want done", e.Status)
	}
}

// TestSleepSurvivesRestart: a sleeping dunning survives the daemon's stop
// (SIGTERM, then SIGKILL): on disk it is waiting with its wake time, and a
// new daemon wakes it no earlier than that and sends the later reminders,
// each exactly once.
func TestSleepSurvivesRestart(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, func(p program) { p.sleeps(3*time.Second, 300*time.Millisecond) })
			w.start()
			qid := w.post(refInvoice, "", invoiceFailedBody("evt_if_r", "in_r"))
			wt := w.waitSleeping(qid, "wait_1")
			w.stop(sig)
			// With no daemon, the CLI reads the files: the sleep is there.
			e := w.show(qid)
			if e.Status != touba.StatusWaiting {
				t.Fatalf("after %v the entry is %s on disk, want waiting", sig, e.Status)
			}
			if got := e.wait(t, "wait_1"); got.State != touba.WaitOpen || got.WakeAt == nil || !got.WakeAt.Equal(*wt.WakeAt) {
				t.Fatalf("after %v the sleep on disk is %+v, want open until %v", sig, got, wt.WakeAt)
			}
			restarted := time.Now()
			w.start()
			w.waitStatus(qid, touba.StatusDone)
			cs := w.callsOf("remind", qid)
			if len(cs) != 3 || reminderOf(t, cs[0]) != 1 || reminderOf(t, cs[1]) != 2 || reminderOf(t, cs[2]) != 3 {
				t.Fatalf("reminders across the restart: %+v, want 1, 2, 3 once each", cs)
			}
			if cs[1].At.Before(*wt.WakeAt) {
				t.Fatalf("the second reminder went at %v, before the sleep's end %v", cs[1].At, *wt.WakeAt)
			}
			if restarted.After(*wt.WakeAt) {
				t.Logf("the restart took past the wake time (%v): the entry woke at start", restarted.Sub(*wt.WakeAt))
			}
		})
	}
}

// TestReloadChangingCompletedStepParks: version pinning. A reload that
// changes only steps an entry has not reached lets it go on; one that
// renames a step it completed parks it ProgramChanged at its next run,
// naming the step, and runs nothing more.
func TestReloadChangingCompletedStepParks(t *testing.T) {
	t.Parallel()
	const sleep = 5 * time.Second
	w := newWorld(t, func(p program) { p.sleeps(sleep, 300*time.Millisecond) })
	w.start()

	// A step not yet reached changes: the run goes on under the new one.
	a := w.post(refInvoice, "", invoiceFailedBody("evt_if_a", "in_a"))
	wa := w.waitSleeping(a, "wait_1")
	p := readExample(t)
	p.trigger(refOrder)["retry"] = map[string]any{"max_attempts": 2, "initial_interval_ms": 50, "max_interval_ms": 100}
	p.sleeps(sleep, 200*time.Millisecond)
	w.reload(p)
	if time.Now().After(*wa.WakeAt) {
		t.Fatalf("the reload came after the sleep's end: inconclusive, make the sleep longer")
	}
	w.waitStatus(a, touba.StatusDone)
	if n := len(w.callsOf("remind", a)); n != 3 {
		t.Fatalf("%d reminders after a reload that changed only wait_2, want 3", n)
	}

	// The completed step remind_1 is renamed: the entry parks.
	b := w.post(refInvoice, "", invoiceFailedBody("evt_if_b", "in_b"))
	wb := w.waitSleeping(b, "wait_1")
	w.once("remind", b)
	p.step(refInvoice, "remind_1")["id"] = "first_reminder"
	w.reload(p)
	if time.Now().After(*wb.WakeAt) {
		t.Fatalf("the reload came after the sleep's end: inconclusive, make the sleep longer")
	}
	eb := w.waitStatus(b, touba.StatusParked)
	if eb.ErrorCode != touba.EProgramChanged || !strings.Contains(eb.ErrorMessage, "remind_1") {
		t.Fatalf("after renaming a completed step: %s %s %q, want parked ProgramChanged naming remind_1", eb.Status, eb.ErrorCode, eb.ErrorMessage)
	}
	w.once("remind", b)

	// An entry accepted under the new program runs it.
	c := w.post(refInvoice, "", invoiceFailedBody("evt_if_c", "in_c"))
	w.waitSleeping(c, "wait_1")
	if e := w.show(c); e.output(t, "first_reminder") == nil {
		t.Fatalf("the new entry has no output of first_reminder")
	}
}
