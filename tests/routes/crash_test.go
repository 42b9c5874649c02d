package routes_test

import (
	"net/http"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/trigger"
)

// The crash points of routes (SPEC §2.4): inside intake's transaction,
// after the accepting entry and before its routes' (the stores'
// routes-between), and after the commit, before the answer
// (after-routed). A SIGKILL at either leaves all of them or none; the
// sender's retry then makes them all, or finds them all.
var routeCrashPoints = []struct {
	point string
	all   bool // what the crash leaves: every entry, or none
}{
	{trigger.CrashRoutesBetween, false},
	{trigger.CrashAfterRouted, true},
}

func TestCrashBetweenAcceptingAndRoutes(t *testing.T) {
	for _, backend := range backends {
		for _, cp := range routeCrashPoints {
			t.Run(backend+"/"+cp.point, func(t *testing.T) {
				t.Parallel()
				w := newWorld(t, backend, allRoutes...)
				w.start(cp.point)
				// evt_big feeds two routes; the daemon dies before answering.
				body := event("evt_big", "invoice.paid", `{"id": "in_2", "customer": "cus_2", "amount_paid": 250000}`)
				if a, err := w.sendTo("stripe/Events", body); err == nil {
					t.Fatalf("the daemon answered %+v; want it killed at %s", a, cp.point)
				}
				if code := w.d.Wait(waitLong); code != -1 {
					t.Fatalf("exit code %d, want -1 (SIGKILL)\n%s", code, w.d.Log())
				}
				// With no daemon, the files (or the database) hold all or none.
				got := w.ofEvent("evt_big")
				want := map[bool]int{true: 3, false: 0}[cp.all]
				if len(got) != want {
					t.Fatalf("after a crash at %s: entries %v, want %d (the accepting entry and its 2 routes', or none)", cp.point, got, want)
				}
				if cp.all {
					for _, ref := range []string{refEvents, refInvoice, refLarge} {
						if _, ok := got[ref]; !ok {
							t.Fatalf("no entry of %s after the crash: %v", ref, got)
						}
					}
				}
				// Restarted, the sender's retry: accepted anew when nothing
				// was kept, or consumed when all was; either way one of each.
				w.start("")
				a := w.send(body)
				switch {
				case !cp.all && (a.Status != http.StatusAccepted || a.Answer != touba.IntakeEnqueued):
					t.Errorf("retry after a crash that kept nothing: %+v, want 202 enqueued", a)
				case cp.all && (a.Status != http.StatusOK || a.Answer != touba.IntakeConsumed):
					t.Errorf("retry after a crash that kept all: %+v, want 200 consumed", a)
				}
				w.waitStatus(refInvoice, "evt_big", touba.StatusDone)
				w.waitStatus(refLarge, "evt_big", touba.StatusDone)
				if got := w.ofEvent("evt_big"); len(got) != 3 {
					t.Errorf("entries %v, want one of each of the 3 triggers", got)
				}
				for _, tool := range []string{"InvoicePaid", "LargePayment"} {
					if n := len(w.r.calls(tool)); n != 1 {
						t.Errorf("%s called %d times, want once", tool, n)
					}
				}
			})
		}
	}
}
