package durable_test

import (
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

const refCustomerDeleted = "trigger:examples.durable/CustomerDeleted"

// TestKeysByMeaningSurviveReloads (SPEC §2.3 reloads, issue 33 defect 4).
// A dunning entry sleeps, cancellable by its invoice's payment and by its
// customer's deletion. A reload reorders cancel_on: a deletion whose
// customer is the invoice's id (what position 0 read before) cancels
// nothing, the deletion of its own customer cancels it. A checkout waits
// for its payment; a reload points the wait_for at another trigger: the
// waiting entry still matches the payment trigger it began with. A
// reload that removes cancel_on leaves an entry accepted before it
// cancellable as it was.
func TestKeysByMeaningSurviveReloads(t *testing.T) {
	t.Parallel()
	customerDeleted := map[string]any{"ref": refCustomerDeleted,
		"source": map[string]any{"kind": "webhook", "event_id": map[string]any{"header": "x-touba-event-id"}}, "steps": []any{}}
	byInvoice := map[string]any{"trigger": refPaid, "match": map[string]any{"$ref": "/event/body/data/object/id"}, "on": "/body/data/object/id"}
	byCustomer := map[string]any{"trigger": refCustomerDeleted, "match": map[string]any{"$ref": "/event/body/data/object/customer"}, "on": "/body/customer"}
	edit := func(p program, cancels ...any) {
		p.trigger(refOrder)["retry"] = map[string]any{"max_attempts": 2, "initial_interval_ms": 50, "max_interval_ms": 100}
		p.sleeps(10*time.Minute, 100*time.Millisecond)
		p.paymentTimeout(10 * time.Minute)
		p["triggers"] = append(p["triggers"].([]any), customerDeleted)
		p.trigger(refInvoice)["cancel_on"] = cancels
	}
	w := newWorld(t, func(p program) { edit(p, byInvoice, byCustomer) })
	w.start()
	inv := w.post(refInvoice, "", `{"id": "evt_if_k", "type": "invoice.payment_failed", "data": {"object": {"id": "in_k", "customer": "cus_9", "amount_due": 990}}}`)
	w.waitSleeping(inv, "wait_1")
	co := w.post(refCheckout, "", checkoutBody("evt_cs_k", "ord-k"))
	w.waitShow(co, "the checkout to wait for its payment", func(e shown) bool { return e.Status == touba.StatusWaiting })

	p := readExample(t)
	edit(p, byCustomer, byInvoice) // reordered
	// The checkout now waits for another trigger's deliveries.
	p["triggers"] = append(p["triggers"].([]any), map[string]any{"ref": refPayment + "V2",
		"source": map[string]any{"kind": "webhook", "event_id": map[string]any{"json_pointer": "/id"}}, "steps": []any{}})
	p.step(refCheckout, "paid")["wait_for"].(map[string]any)["trigger"] = refPayment + "V2"
	w.reload(p)

	wrong := w.post(refCustomerDeleted, "del-1", `{"customer": "in_k"}`)
	w.waitStatus(wrong, touba.StatusDone)
	if e := w.show(inv); e.Status != touba.StatusWaiting {
		t.Fatalf("a deletion of customer \"in_k\" (the invoice's id) left the entry %s (%s), want still waiting", e.Status, e.ErrorMessage)
	}
	w.post(refCustomerDeleted, "del-2", `{"customer": "cus_9"}`)
	if e := w.waitStatus(inv, touba.StatusCancelled); e.ErrorCode != touba.ERunCancelled {
		t.Fatalf("cancelled with %s, want %s", e.ErrorCode, touba.ERunCancelled)
	}

	w.post(refPayment, "", paymentBody("evt_pi_k", "ord-k"))
	e := w.waitStatus(co, touba.StatusDone)
	if out := e.output(t, "paid"); len(out) == 0 || string(out) == "null" {
		t.Fatalf("the checkout's wait ended without the payment it began with: %s", out)
	}

	// A reload that removes cancel_on leaves an accepted entry cancellable
	// as it was: its cancel keys are still read.
	inv2 := w.post(refInvoice, "", `{"id": "evt_if_k2", "type": "invoice.payment_failed", "data": {"object": {"id": "in_k2", "customer": "cus_8", "amount_due": 990}}}`)
	w.waitSleeping(inv2, "wait_1")
	p = readExample(t)
	edit(p)
	delete(p.trigger(refInvoice), "cancel_on")
	p["triggers"] = append(p["triggers"].([]any), map[string]any{"ref": refPayment + "V2",
		"source": map[string]any{"kind": "webhook", "event_id": map[string]any{"json_pointer": "/id"}}, "steps": []any{}})
	p.step(refCheckout, "paid")["wait_for"].(map[string]any)["trigger"] = refPayment + "V2"
	w.reload(p)
	w.post(refPaid, "", invoicePaidBody("evt_ip_k2", "in_k2"))
	if e := w.waitStatus(inv2, touba.StatusCancelled); e.ErrorCode != touba.ERunCancelled {
		t.Fatalf("after cancel_on was removed: cancelled with %s, want %s", e.ErrorCode, touba.ERunCancelled)
	}
}
