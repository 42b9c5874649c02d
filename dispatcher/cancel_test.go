package dispatcher_test

import (
	"testing"

	touba "github.com/touba/touba-trigger"
)

// trigger:t/void cancels an entry of trigger:t/order with the same body
// "order" (cancel_on).
const voidTrig = "t/void"

func voidTrigger() map[string]any {
	return trig(voidTrig, nil, toolStep("ack", toolThen, okInput("", nil)))
}

// A cancel_on match while a step's handler call is in flight lets the call
// finish (its outcome is journaled), then no later step starts: the entry
// ends cancelled with RunCancelled.
func TestCancelOnBetweenSteps(t *testing.T) {
	billCalls, shipCalls, release := tmp(t, "bill"), tmp(t, "ship"), tmp(t, "release")
	w := newWorld(t, programOf(t,
		trig(orderTrig, cancelBy(voidTrig, "order"),
			toolStep("bill", toolW, map[string]any{"mode": "block", "until_file": release, "calls": billCalls}),
			toolStep("ship", toolThen, okInput(shipCalls, nil)),
		), voidTrigger(),
	), processManifest(t, []string{toolW, toolThen}, toolW), nil, true)
	w.mustWaits()
	qid := w.post(orderTrig, `{"order": "o-1"}`)
	w.until("the bill call to start", func() bool { return len(calls(t, billCalls)) == 1 })
	w.post(voidTrig, `{"order": "o-1"}`)
	if e := w.entry(qid); e.Status != touba.StatusRunning {
		t.Fatalf("entry %s while its call is in flight, want running", e.Status)
	}
	touch(t, release)
	e := w.wait(qid, touba.StatusCancelled)
	if e.ErrorCode != touba.ERunCancelled {
		t.Fatalf("entry code %q, want %s", e.ErrorCode, touba.ERunCancelled)
	}
	if eff := w.effect(qid, "bill"); eff == nil || eff.State != touba.EffectApplied {
		t.Fatalf("bill effect %+v, want applied", eff)
	}
	if cs := calls(t, shipCalls); len(cs) != 0 {
		t.Fatalf("ship calls %+v, want none", cs)
	}
	if rs := w.waitRuns(qid, 1); rs[0].Status != touba.StatusCancelled || rs[0].ErrorCode != touba.ERunCancelled {
		t.Fatalf("run %+v, want cancelled", rs[0])
	}
}

// A cancel_on match ends a waiting entry at once (the store does, in the
// matching delivery's transaction), and its wait cancelled: nothing of it
// runs again.
func TestCancelOnWhileWaiting(t *testing.T) {
	shipCalls := tmp(t, "ship")
	w := newWorld(t, programOf(t,
		trig(orderTrig, cancelBy(voidTrig, "order"),
			waitStep("paid", payTrig, "order", 0, ""),
			toolStep("ship", toolThen, okInput(shipCalls, nil)),
		),
		trig(payTrig, nil, toolStep("ack", toolThen, okInput("", nil))),
		voidTrigger(),
	), processManifest(t, []string{toolThen}), nil, true)
	w.mustWaits()
	qid := w.post(orderTrig, `{"order": "o-1"}`)
	w.wait(qid, touba.StatusWaiting)
	other := w.post(orderTrig, `{"order": "o-2"}`)
	w.wait(other, touba.StatusWaiting)
	w.post(voidTrig, `{"order": "o-1"}`)
	if e := w.entry(qid); e.Status != touba.StatusCancelled || e.ErrorCode != touba.ERunCancelled {
		t.Fatalf("entry %s %q after the void, want cancelled %s", e.Status, e.ErrorCode, touba.ERunCancelled)
	}
	if ws := w.waitsOf(qid); len(ws) != 1 || ws[0].State != touba.WaitCancelled {
		t.Fatalf("waits %+v, want one cancelled", ws)
	}
	// The payment of o-1 finds no wait; o-2's still runs to the end.
	w.post(payTrig, `{"order": "o-1", "amount": 1}`)
	w.post(payTrig, `{"order": "o-2", "amount": 2}`)
	w.wait(other, touba.StatusDone)
	if e := w.entry(qid); e.Status != touba.StatusCancelled {
		t.Fatalf("entry %s, want still cancelled", e.Status)
	}
	if cs := calls(t, shipCalls); len(cs) != 1 {
		t.Fatalf("ship calls %+v, want o-2's only", cs)
	}
}

// A cancel_on match ends a pending entry before any run of it: no step
// starts.
func TestCancelOnWhilePending(t *testing.T) {
	shipCalls := tmp(t, "ship")
	w := newWorld(t, programOf(t,
		trig(orderTrig, cancelBy(voidTrig, "order"), toolStep("ship", toolThen, okInput(shipCalls, ref("/event/body/order")))),
		voidTrigger(),
	), processManifest(t, []string{toolThen}), nil, false)
	w.mustWaits()
	qid := w.post(orderTrig, `{"order": "o-1"}`)
	w.post(voidTrig, `{"order": "o-1"}`)
	if e := w.entry(qid); e.Status != touba.StatusCancelled || e.ErrorCode != touba.ERunCancelled {
		t.Fatalf("entry %s %q after the void, want cancelled %s", e.Status, e.ErrorCode, touba.ERunCancelled)
	}
	w.start()
	other := w.post(orderTrig, `{"order": "o-2"}`)
	w.wait(other, touba.StatusDone)
	if cs := calls(t, shipCalls); len(cs) != 1 || string(field(t, cs[0].Input, "data")) != `"o-2"` {
		t.Fatalf("ship calls %+v, want o-2's only", cs)
	}
	if rs, err := w.st.Runs(t.Context(), qid); err != nil || len(rs) != 0 {
		t.Fatalf("runs of the cancelled entry %+v, %v; want none", rs, err)
	}
}
