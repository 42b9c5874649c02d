package routes_test

import (
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// TestReloadAddsAndRemovesRoutes (SPEC §2.3, §2.4): a route added by a
// reload takes the deliveries accepted after it, not those before; a
// route removed by a reload strands nothing: its pending entry is parked
// ProgramChanged, and the accepting entries keep saying what they fed.
func TestReloadAddsAndRemovesRoutes(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, backend, invoiceRoute, refundRoute)
			w.start("")
			if out, err := w.run("triggers", "pause", refRefund); err != nil {
				t.Fatalf("pause: %v\n%s", err, out)
			}
			before := w.accept(event("evt_s1", "customer.subscription.deleted", `{"id": "sub_1"}`))
			w.accept(event("evt_r1", "charge.refunded", `{"id": "ch_1"}`))
			refund := w.waitStatus(refRefund, "evt_r1", touba.StatusPending)

			// The next program: the cancellations' route added, the
			// refunds' removed.
			w.setProgram(invoiceRoute, cancelRoute)
			w.reload()

			// Accepted before the reload: not fed to the new route.
			if got := w.ofEvent("evt_s1"); len(got) != 1 {
				t.Errorf("evt_s1 has entries %v after the reload, want its accepting entry only", got)
			}
			if shown := w.show(before); len(shown.Routes) != 2 {
				t.Errorf("evt_s1's routes %+v, want the two routes of its time", shown.Routes)
			}
			// Accepted after: fed to it, and run.
			w.accept(event("evt_s2", "customer.subscription.deleted", `{"id": "sub_2"}`))
			w.waitStatus(refCancel, "evt_s2", touba.StatusDone)
			if calls := w.waitCalls("SubscriptionDeleted", 1); len(calls) != 1 || calls[0]["subscription"] != "sub_2" {
				t.Errorf("SubscriptionDeleted calls %v, want sub_2 once", calls)
			}
			// The removed route's pending entry is parked, not stranded.
			var parked entry
			testkit.WaitFor(t, waitLong, func() bool {
				parked = w.show(refund.QueueID)
				return parked.Status == touba.StatusParked
			}, "the removed route's entry to park")
			if parked.ErrorCode != touba.EProgramChanged {
				t.Errorf("removed route's entry %+v, want parked %s", parked, touba.EProgramChanged)
			}
			// A refund now feeds nothing but its accepting entry.
			w.accept(event("evt_r2", "charge.refunded", `{"id": "ch_2"}`))
			if got := w.ofEvent("evt_r2"); len(got) != 1 {
				t.Errorf("evt_r2 fed %v, want no route", got)
			}
			if n := len(w.r.calls("ChargeRefunded")); n != 0 {
				t.Errorf("ChargeRefunded called %d times, want none", n)
			}
		})
	}
}
