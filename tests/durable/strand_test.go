package durable_test

import (
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// TestReloadStrandsNothing (SPEC §2.3 reloads, issue 33 defect 2): a
// reload renames the sleep a dunning entry is in and renames the
// checkout trigger (the program no longer has it) whose entry waits for its payment. Both are parked
// ProgramChanged at the reload, naming what changed (before, both waited
// on for good: the sleep's end parked it only then, and nothing ever
// matched the checkout again), the checkout's wait no longer takes a
// payment, and both are settled: the dunning with --repin, the checkout
// by a replay once its trigger is back.
func TestReloadStrandsNothing(t *testing.T) {
	t.Parallel()
	const sleep = 4 * time.Second
	w := newWorld(t, func(p program) { p.sleeps(sleep, 100*time.Millisecond); p.paymentTimeout(10 * time.Minute) })
	w.start()
	inv := w.post(refInvoice, "", invoiceFailedBody("evt_if_st", "in_st"))
	wi := w.waitSleeping(inv, "wait_1")
	co := w.post(refCheckout, "", checkoutBody("evt_cs_st", "ord-st"))
	w.waitShow(co, "the checkout to wait for its payment", func(e shown) bool { return e.Status == touba.StatusWaiting })

	orig := readExample(t)
	orig.trigger(refOrder)["retry"] = map[string]any{"max_attempts": 2, "initial_interval_ms": 50, "max_interval_ms": 100}
	orig.sleeps(sleep, 100*time.Millisecond)
	orig.paymentTimeout(10 * time.Minute)
	p := readExample(t)
	p.trigger(refOrder)["retry"] = orig.trigger(refOrder)["retry"]
	p.sleeps(100*time.Millisecond, 100*time.Millisecond)
	p.step(refInvoice, "wait_1")["id"] = "pause_1"
	// The checkout trigger goes under another name (its binding must
	// stay in use): the program no longer has refCheckout.
	p.trigger(refCheckout)["ref"] = refCheckout + "V2"
	w.reload(p)
	if time.Now().After(*wi.WakeAt) {
		t.Fatalf("the reload came after the sleep's end: inconclusive, make the sleep longer")
	}
	ei := w.waitStatus(inv, touba.StatusParked)
	ec := w.waitStatus(co, touba.StatusParked)
	if time.Now().After(*wi.WakeAt) {
		t.Fatalf("the dunning entry parked only after its sleep's end, want at the reload")
	}
	if ei.ErrorCode != touba.EProgramChanged || !strings.Contains(ei.ErrorMessage, "wait_1") {
		t.Fatalf("dunning parked %s %q, want ProgramChanged naming wait_1", ei.ErrorCode, ei.ErrorMessage)
	}
	if ec.ErrorCode != touba.EProgramChanged || !strings.Contains(ec.ErrorMessage, refCheckout) {
		t.Fatalf("checkout parked %s %q, want ProgramChanged naming its trigger", ec.ErrorCode, ec.ErrorMessage)
	}
	pay := w.post(refPayment, "", paymentBody("evt_pi_st", "ord-st"))
	if e := w.waitStatus(pay, touba.StatusDone); len(e.MatchedWaits) != 0 {
		t.Fatalf("the payment matched the parked checkout's wait: %+v", e.MatchedWaits)
	}

	// The dunning: pinned to the running definition, it runs to done.
	w.cliJSON(nil, "queue", "replay", inv, "--repin", "--yes")
	w.waitStatus(inv, touba.StatusDone)
	if n := len(w.callsOf("remind", inv)); n != 3 {
		t.Fatalf("%d reminders after --repin, want 3 (remind_1 kept, remind_2 and remind_3)", n)
	}

	// The checkout, once its trigger is back: replayed, it waits again
	// and the next payment of its order ends it.
	w.reload(orig)
	var rep admin.ReplayReport
	w.cliJSON(&rep, "queue", "replay", co)
	if len(rep.Items) != 1 || !rep.Items[0].Replayed {
		t.Fatalf("replay of the checkout: %+v", rep.Items)
	}
	w.waitShow(co, "the replayed checkout to wait again", func(e shown) bool { return e.Status == touba.StatusWaiting })
	w.post(refPayment, "", paymentBody("evt_pi_st2", "ord-st"))
	w.waitStatus(co, touba.StatusDone)
}
