package routes_test

import (
	"net/http"
	"slices"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// The events of the fan-out: what each is and which routes take it.
var fanOut = []struct {
	id, body string
	routes   []string
}{
	{"evt_inv", event("evt_inv", "invoice.paid", `{"id": "in_1", "customer": "cus_1", "amount_paid": 1234}`), []string{refInvoice}},
	{"evt_big", event("evt_big", "invoice.paid", `{"id": "in_2", "customer": "cus_2", "amount_paid": 250000}`), []string{refInvoice, refLarge}},
	{"evt_ref", event("evt_ref", "charge.refunded", `{"id": "ch_1"}`), []string{refRefund}},
	{"evt_sub", event("evt_sub", "customer.subscription.deleted", `{"id": "sub_1"}`), []string{refCancel}},
	{"evt_new", event("evt_new", "customer.created", `{"id": "cus_9"}`), nil},
}

// TestFanOut: each delivery feeds exactly the routes whose filter holds,
// each route's entry runs its own step, the accepting entry (no steps)
// ends done at once and says which routes it fed, and a route entry
// carries its own key and names its source.
func TestFanOut(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, backend, allRoutes...)
			w.start("")
			accepted := map[string]string{}
			for _, ev := range fanOut {
				accepted[ev.id] = w.accept(ev.body)
			}
			w.waitCalls("InvoicePaid", 2)
			w.waitCalls("LargePayment", 1)
			w.waitCalls("ChargeRefunded", 1)
			w.waitCalls("SubscriptionDeleted", 1)
			for _, ev := range fanOut {
				got := w.ofEvent(ev.id)
				if e := got[refEvents]; e.QueueID != accepted[ev.id] || e.Status != touba.StatusDone {
					t.Errorf("%s: accepting entry %+v, want %s done at once", ev.id, e, accepted[ev.id])
				}
				var routes []string
				for ref := range got {
					if ref != refEvents {
						routes = append(routes, ref)
					}
				}
				slices.Sort(routes)
				want := slices.Sorted(slices.Values(ev.routes))
				if !slices.Equal(routes, want) {
					t.Errorf("%s fed %v, want exactly %v", ev.id, routes, want)
				}
				for _, ref := range ev.routes {
					w.waitStatus(ref, ev.id, touba.StatusDone)
				}
			}
			// The $cel input was computed: the amount in units.
			amounts := map[any]bool{}
			for _, in := range w.r.calls("InvoicePaid") {
				amounts[in["amount"]] = true
			}
			if len(amounts) != 2 || !amounts[float64(12)] || !amounts[float64(2500)] {
				t.Errorf("InvoicePaid inputs %v, want amounts 12 and 2500", w.r.calls("InvoicePaid"))
			}
			// Nothing ran twice.
			for tool, n := range map[string]int{"InvoicePaid": 2, "LargePayment": 1, "ChargeRefunded": 1, "SubscriptionDeleted": 1} {
				if got := len(w.r.calls(tool)); got != n {
					t.Errorf("%s called %d times, want %d", tool, got, n)
				}
			}
			// queue show of the accepting entry: every route, fed or not.
			big := w.show(accepted["evt_big"])
			fed := map[string]bool{}
			for _, r := range big.Routes {
				fed[r.TriggerRef] = r.Fed
				if r.Fed && (r.QueueID == "" || r.Status != touba.StatusDone) {
					t.Errorf("evt_big's route %+v, want its entry, done", r)
				}
				if !r.Fed && r.Code != touba.IntakeFiltered {
					t.Errorf("evt_big's route %+v, want not fed: filtered", r)
				}
			}
			if len(big.Routes) != 4 || !fed[refInvoice] || !fed[refLarge] || fed[refRefund] || fed[refCancel] {
				t.Errorf("evt_big's routes %+v, want the four, Invoice and Large fed", big.Routes)
			}
			inv := w.ofEvent("evt_inv")[refInvoice]
			if shown := w.show(inv.QueueID); shown.RoutedFrom != accepted["evt_inv"] || shown.ConcurrencyKey != `"cus_1"` {
				t.Errorf("Invoice's entry %+v, want routed from %s, keyed \"cus_1\"", shown, accepted["evt_inv"])
			}
			// triggers ls: each route under its endpoint, with its own weight.
			var ts []struct {
				TriggerRef string   `json:"trigger_ref"`
				RouteOf    string   `json:"route_of"`
				Routes     []string `json:"routes"`
				Weight     int      `json:"weight"`
			}
			w.cli(&ts, "triggers", "ls")
			if len(ts) != 5 || ts[0].TriggerRef != refEvents || len(ts[0].Routes) != 4 {
				t.Fatalf("triggers ls %+v, want the endpoint first with its 4 routes", ts)
			}
			for _, tr := range ts[1:] {
				if tr.RouteOf != refEvents || (tr.TriggerRef == refRefund) != (tr.Weight == 30) {
					t.Errorf("triggers ls row %+v, want a route of %s (Refund weighted 30)", tr, refEvents)
				}
			}
		})
	}
}

// TestRedeliveryCreatesNothing: a consumed redelivery (the accepting
// entry is done at once) is 200, another body under the id 409, a route's
// own URL 404; none of them creates an entry anywhere or calls anything.
func TestRedeliveryCreatesNothing(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, backend, allRoutes...)
			w.start("")
			body := fanOut[1].body
			qid := w.accept(body)
			w.waitStatus(refInvoice, "evt_big", touba.StatusDone)
			w.waitStatus(refLarge, "evt_big", touba.StatusDone)
			before := w.entries()
			if a := w.send(body); a.Status != http.StatusOK || a.Answer != touba.IntakeConsumed || a.QueueID != qid ||
				a.Code != touba.ETriggerReplayRejected {
				t.Errorf("redelivery: %+v, want 200 consumed, %s", a, qid)
			}
			conflict := event("evt_big", "invoice.paid", `{"id": "in_2", "customer": "cus_2", "amount_paid": 1}`)
			if a := w.send(conflict); a.Status != http.StatusConflict || a.Error.Code != touba.ETriggerEventPayloadConflict || a.Error.QueueID != qid {
				t.Errorf("conflict: %+v, want 409 naming %s", a, qid)
			}
			a, err := w.sendTo("stripe/InvoicePaid", event("evt_x", "invoice.paid", `{"id": "in_9"}`))
			if err != nil || a.Status != http.StatusNotFound || a.Error.Code != touba.ETriggerNotFound {
				t.Errorf("POST to a route: %+v, %v, want 404 TriggerNotFound", a, err)
			}
			if a := w.send(`{"type": "invoice.paid"}`); a.Status != http.StatusBadRequest || a.Error.Code != touba.ETriggerEventIDMissing {
				t.Errorf("no id: %+v, want 400 TriggerEventIdMissing", a)
			}
			after := w.entries()
			for ref, list := range after {
				if len(list) != len(before[ref]) {
					t.Errorf("%s has %d entries after the redeliveries, %d before", ref, len(list), len(before[ref]))
				}
			}
			if n, m := len(w.r.calls("InvoicePaid")), len(w.r.calls("LargePayment")); n != 1 || m != 1 {
				t.Errorf("calls %d, %d, want 1 each", n, m)
			}
		})
	}
}

// TestRoutePauseAndReplay: a paused route holds its own entries while
// the others run; resumed, its step fails (the remote refuses); replaying
// its entry runs that entry alone: no other route runs again, no entry is
// created.
func TestRoutePauseAndReplay(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, backend, allRoutes...)
			w.start("")
			if out, err := w.run("triggers", "pause", refRefund, "--reason", "ledger migration"); err != nil {
				t.Fatalf("pause: %v\n%s", err, out)
			}
			w.accept(event("evt_r1", "charge.refunded", `{"id": "ch_1"}`))
			w.accept(event("evt_i1", "invoice.paid", `{"id": "in_1", "customer": "cus_1", "amount_paid": 100}`))
			w.waitStatus(refInvoice, "evt_i1", touba.StatusDone)
			// The invoice, accepted after, ran; the paused route's entry waits.
			if e := w.ofEvent("evt_r1")[refRefund]; e.Status != touba.StatusPending || len(w.r.calls("ChargeRefunded")) != 0 {
				t.Fatalf("paused route's entry %+v, %d calls; want pending, none", e, len(w.r.calls("ChargeRefunded")))
			}
			var ts []struct {
				TriggerRef string `json:"trigger_ref"`
				Paused     bool   `json:"paused"`
			}
			w.cli(&ts, "triggers", "ls")
			for _, tr := range ts {
				if tr.Paused != (tr.TriggerRef == refRefund) {
					t.Errorf("triggers ls: %+v, want only %s paused", tr, refRefund)
				}
			}
			w.r.setFail("ChargeRefunded", true)
			if out, err := w.run("triggers", "resume", refRefund); err != nil {
				t.Fatalf("resume: %v\n%s", err, out)
			}
			failed := w.waitStatus(refRefund, "evt_r1", touba.StatusFailed)
			before := w.entries()
			w.r.setFail("ChargeRefunded", false)
			if out, err := w.run("queue", "replay", failed.QueueID, "--reason", "ledger back"); err != nil {
				t.Fatalf("replay: %v\n%s", err, out)
			}
			w.waitStatus(refRefund, "evt_r1", touba.StatusDone)
			if n := len(w.waitCalls("ChargeRefunded", 1)); n != 1 {
				t.Errorf("ChargeRefunded called %d times, want 1", n)
			}
			if n := len(w.r.calls("InvoicePaid")); n != 1 {
				t.Errorf("InvoicePaid called %d times after the replay, want 1: the replay is the route's entry alone", n)
			}
			for ref, list := range w.entries() {
				if len(list) != len(before[ref]) {
					t.Errorf("%s: %d entries after the replay, %d before", ref, len(list), len(before[ref]))
				}
			}
		})
	}
}

// TestRouteKeyHoldsItsOwnEntries: a route's concurrency key holds that
// route's later entry of the key while one runs; another route fed by
// the same deliveries is not held.
func TestRouteKeyHoldsItsOwnEntries(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, backend, allRoutes...)
			hold := make(chan struct{})
			w.r.mu.Lock()
			w.r.hold = hold
			w.r.mu.Unlock()
			w.start("")
			big := `{"id": "in_%d", "customer": "cus_1", "amount_paid": 500000}`
			w.accept(event("evt_k1", "invoice.paid", fmtJSON(big, 1)))
			w.accept(event("evt_k2", "invoice.paid", fmtJSON(big, 2)))
			// Both LargePayment entries (no key) run; of InvoicePaid's, one
			// runs and the other is held behind it.
			w.waitStatus(refLarge, "evt_k1", touba.StatusRunning)
			w.waitStatus(refLarge, "evt_k2", touba.StatusRunning)
			var held []entry
			w.cli(&held, "queue", "ls", "--trigger", refInvoice, "--status", "pending")
			if len(held) != 1 || held[0].EventID != "evt_k2" {
				t.Errorf("InvoicePaid pending %+v, want evt_k2 held behind evt_k1", held)
			}
			close(hold)
			w.waitStatus(refInvoice, "evt_k2", touba.StatusDone)
			w.waitStatus(refLarge, "evt_k2", touba.StatusDone)
		})
	}
}
