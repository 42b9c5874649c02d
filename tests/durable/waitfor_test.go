package durable_test

import (
	"encoding/json"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// matchedOutput is the output of a matched wait_for step (SPEC §2.3).
type matchedOutput struct {
	QueueID string            `json:"queue_id"`
	EventID string            `json:"event_id"`
	Headers map[string]string `json:"headers"`
	Body    struct {
		Data struct {
			Object struct {
				Metadata struct {
					OrderID string `json:"order_id"`
				} `json:"metadata"`
			} `json:"object"`
		} `json:"data"`
	} `json:"body"`
}

// TestPaymentMatchesWaitingCheckout: flow (a). A checkout waits for its
// payment; a payment of another order matches nothing; the payment of its
// order is an entry of its own trigger, ends the wait (both entries'
// `queue show` name the match), and the order is posted exactly once.
func TestPaymentMatchesWaitingCheckout(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(p program) { p.paymentTimeout(10 * time.Minute) })
	w.start()
	began := time.Now()
	a := w.post(refCheckout, "", checkoutBody("evt_cs_42", "ord-42"))
	ea := w.waitShow(a, "the checkout to wait for its payment", func(e shown) bool { return e.Status == touba.StatusWaiting })
	wt := ea.wait(t, "paid")
	key := touba.WaitKeyOf(refCheckout, "paid", refPayment, "/body/data/object/metadata/order_id")
	if wt.Kind != touba.WaitEvent || wt.State != touba.WaitOpen || wt.Key != key || wt.Value != `"ord-42"` {
		t.Fatalf("the checkout's wait: %+v, want an open event wait keyed %s on \"ord-42\"", wt, key)
	}
	if wt.WakeAt == nil || wt.WakeAt.Before(began.Add(10*time.Minute-time.Second)) || wt.WakeAt.After(time.Now().Add(10*time.Minute+time.Second)) {
		t.Fatalf("the wait's timeout is %v, want about 10 minutes from the step", wt.WakeAt)
	}

	other := w.post(refPayment, "", paymentBody("evt_pi_99", "ord-99"))
	eo := w.waitStatus(other, touba.StatusDone)
	if len(eo.MatchedWaits) != 0 {
		t.Fatalf("the payment of ord-99 matched a wait: %+v", eo.MatchedWaits)
	}
	if e := w.show(a); e.Status != touba.StatusWaiting {
		t.Fatalf("the checkout of ord-42 is %s after the payment of ord-99, want still waiting", e.Status)
	}

	b := w.post(refPayment, "", paymentBody("evt_pi_42", "ord-42"))
	if b == a {
		t.Fatalf("the payment was answered with the checkout's queue id %s", a)
	}
	ea = w.waitStatus(a, touba.StatusDone)
	if wt := ea.wait(t, "paid"); wt.State != touba.WaitMatched || wt.MatchedQueueID != b {
		t.Fatalf("the checkout's wait after the payment: %+v, want matched by %s", wt, b)
	}
	var out matchedOutput
	if err := json.Unmarshal(ea.output(t, "paid"), &out); err != nil {
		t.Fatalf("output of paid: %v: %s", err, ea.output(t, "paid"))
	}
	if out.QueueID != b || out.EventID != "evt_pi_42" || out.Body.Data.Object.Metadata.OrderID != "ord-42" {
		t.Fatalf("output of paid: %+v, want the payment's delivery (queue id %s, event evt_pi_42)", out, b)
	}

	// The payment is an entry of its own trigger, and its `queue show`
	// names the wait it ended.
	eb := w.waitStatus(b, touba.StatusDone)
	if eb.TriggerRef != refPayment || eb.EventID != "evt_pi_42" {
		t.Fatalf("the payment's entry: trigger %s, event %s", eb.TriggerRef, eb.EventID)
	}
	found := false
	for _, wt := range eb.MatchedWaits {
		found = found || (wt.QueueID == a && wt.StepID == "paid" && wt.State == touba.WaitMatched && wt.MatchedQueueID == b)
	}
	if !found {
		t.Fatalf("queue show of the payment %s does not list the wait it matched (%s, paid): %+v", b, a, eb.MatchedWaits)
	}

	c := w.once("settle", a)
	if c.Action != "order" || c.EffectID != touba.EffectIDFor(a, "settle", 0) {
		t.Fatalf("settle: %+v, want the order posted under effect %s", c, touba.EffectIDFor(a, "settle", 0))
	}
	var in struct {
		OrderID string        `json:"order_id"`
		Payment matchedOutput `json:"payment"`
	}
	if err := json.Unmarshal(c.Input, &in); err != nil || in.OrderID != "ord-42" || in.Payment.QueueID != b {
		t.Fatalf("settle's input %s (%v): want order ord-42 and the payment %s", c.Input, err, b)
	}
	// The sender's redelivery of the payment is acknowledged (200
	// consumed) and matches nothing again.
	status, qid := testkit.Post(t, w.d.URL()+"/triggers/examples.durable/PaymentSucceeded", "", paymentBody("evt_pi_42", "ord-42"),
		"Content-Type", "application/json")
	if status != 200 || qid != b {
		t.Fatalf("redelivery of the payment: status %d, queue id %s, want 200 and %s", status, qid, b)
	}
	w.once("settle", a)
}

// TestPaymentBeforeCheckoutCounts: a payment accepted before its checkout
// began waiting is consumed by that wait (the earliest unconsumed one),
// once: a second checkout of the same order waits.
func TestPaymentBeforeCheckoutCounts(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(p program) { p.paymentTimeout(10 * time.Minute) })
	w.start()
	b := w.post(refPayment, "", paymentBody("evt_pi_43", "ord-43"))
	w.waitStatus(b, touba.StatusDone)
	a := w.post(refCheckout, "", checkoutBody("evt_cs_43", "ord-43"))
	ea := w.waitStatus(a, touba.StatusDone)
	if wt := ea.wait(t, "paid"); wt.State != touba.WaitMatched || wt.MatchedQueueID != b {
		t.Fatalf("the checkout's wait: %+v, want matched by the earlier payment %s", wt, b)
	}
	if c := w.once("settle", a); c.Action != "order" {
		t.Fatalf("settle: %+v, want the order posted", c)
	}
	// The offer is consumed: another checkout of ord-43 finds none.
	a2 := w.post(refCheckout, "", checkoutBody("evt_cs_43b", "ord-43"))
	e2 := w.waitShow(a2, "the second checkout to wait", func(e shown) bool { return e.Status == touba.StatusWaiting })
	if wt := e2.wait(t, "paid"); wt.State != touba.WaitOpen {
		t.Fatalf("the second checkout's wait: %+v, want open (the payment was consumed by %s)", wt, a)
	}
	w.never("settle", a2)
}

// TestPaymentTimeoutPostsCancellation: flow (a) on timeout. No payment
// comes within the (test copy's 2 s) timeout: the wait ends timed_out, its
// output is null (on_timeout: continue), and settle posts the
// cancellation, once. A late payment is an entry of its own and changes
// nothing.
func TestPaymentTimeoutPostsCancellation(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(p program) { p.paymentTimeout(2 * time.Second) })
	w.start()
	a := w.post(refCheckout, "", checkoutBody("evt_cs_50", "ord-50"))
	ea := w.waitStatus(a, touba.StatusDone)
	wt := ea.wait(t, "paid")
	if wt.State != touba.WaitTimedOut || wt.WakeAt == nil {
		t.Fatalf("the wait: %+v, want timed_out", wt)
	}
	// The timeout runs from the step's start (the dispatcher's clock); the
	// store stamps created_at when its writer commits the wait, a moment
	// later (longer under load), so the gap may fall short of 2 s by that.
	if got := wt.WakeAt.Sub(wt.CreatedAt); got < 2*time.Second-500*time.Millisecond || got > 2*time.Second+time.Second {
		t.Fatalf("the wait's timeout is %v after it began, want 2s", got)
	}
	if out := ea.output(t, "paid"); string(out) != "null" {
		t.Fatalf("output of paid after the timeout: %s, want null", out)
	}
	c := w.once("settle", a)
	if c.Action != "cancellation" {
		t.Fatalf("settle after the timeout: %+v, want the cancellation posted", c)
	}
	if c.At.Before(*wt.WakeAt) {
		t.Fatalf("the cancellation was posted at %v, before the timeout %v", c.At, *wt.WakeAt)
	}
	var in map[string]json.RawMessage
	if err := json.Unmarshal(c.Input, &in); err != nil || string(in["payment"]) != "null" {
		t.Fatalf("settle's input %s: want payment null", c.Input)
	}

	late := w.post(refPayment, "", paymentBody("evt_pi_50", "ord-50"))
	el := w.waitStatus(late, touba.StatusDone)
	if len(el.MatchedWaits) != 0 {
		t.Fatalf("the late payment matched a wait: %+v", el.MatchedWaits)
	}
	if e := w.show(a); e.Status != touba.StatusDone || e.wait(t, "paid").State != touba.WaitTimedOut {
		t.Fatalf("the checkout after the late payment: %s, wait %+v", e.Status, e.wait(t, "paid"))
	}
	w.once("settle", a)
}
