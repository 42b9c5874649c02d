package routes_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// triedDelivery is what `triggers test --json` says of one delivery.
type triedDelivery struct {
	EventID    string `json:"event_id"`
	QueueID    string `json:"queue_id"`
	Taken      bool   `json:"taken"`
	Code       string `json:"code"`
	FilteredBy string `json:"filtered_by"`
	Routes     []struct {
		TriggerRef string `json:"trigger_ref"`
		Fed        bool   `json:"fed"`
	} `json:"routes"`
	Keys []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"keys"`
	Steps []struct {
		ID    string         `json:"id"`
		Input map[string]any `json:"input"`
	} `json:"steps"`
}

type triggerTest struct {
	Source     string          `json:"source"`
	RouteOf    string          `json:"route_of"`
	Program    string          `json:"program"`
	Taken      int             `json:"taken"`
	Deliveries []triedDelivery `json:"deliveries"`
}

// TestTriggersTest: `triggers test` tries a route of the running program
// on its endpoint's stored deliveries (its filter, key and computed
// input), and a route of a candidate program before a reload; the
// endpoint's test shows the routes each delivery would feed. Nothing is
// enqueued, nothing is called.
func TestTriggersTest(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, backend, invoiceRoute, refundRoute)
			w.start("")
			for _, ev := range fanOut {
				w.accept(ev.body)
			}
			// Every delivery a route takes has run before the calls are
			// counted: evt_inv and evt_big feed InvoicePaid (either may end
			// last), evt_ref ChargeRefunded.
			w.waitStatus(refInvoice, "evt_inv", touba.StatusDone)
			w.waitStatus(refInvoice, "evt_big", touba.StatusDone)
			w.waitStatus(refRefund, "evt_ref", touba.StatusDone)
			before, calls := w.entries(), len(w.r.calls("InvoicePaid"))

			var got triggerTest
			w.cli(&got, "triggers", "test", refInvoice, "--last", "10")
			if got.Source != refEvents || got.RouteOf != refEvents || got.Program != "running" || len(got.Deliveries) != 5 || got.Taken != 2 {
				t.Fatalf("triggers test %+v, want 5 deliveries of %s, 2 taken", got, refEvents)
			}
			for _, d := range got.Deliveries {
				switch d.EventID {
				case "evt_inv":
					if !d.Taken || len(d.Keys) != 1 || d.Keys[0].Value != `"cus_1"` || len(d.Steps) != 1 || d.Steps[0].Input["amount"] != float64(12) {
						t.Errorf("evt_inv tried %+v, want taken, keyed \"cus_1\", input amount 12", d)
					}
				case "evt_ref", "evt_sub", "evt_new":
					if d.Taken || d.Code != touba.IntakeFiltered || d.FilteredBy != refInvoice {
						t.Errorf("%s tried %+v, want not taken by %s's filter", d.EventID, d, refInvoice)
					}
				}
			}

			// The endpoint: each delivery's routes.
			w.cli(&got, "triggers", "test", refEvents, "--last", "2")
			if len(got.Deliveries) != 2 || len(got.Deliveries[0].Routes) != 2 {
				t.Fatalf("endpoint test %+v, want the 2 newest with their 2 routes", got)
			}

			// A candidate: the cancellations' route, not in the running
			// program, tried on the same deliveries.
			cand := filepath.Join(w.dir, "next.air.json")
			if err := os.WriteFile(cand, []byte(program(invoiceRoute, cancelRoute)), 0o600); err != nil {
				t.Fatal(err)
			}
			w.cli(&got, "triggers", "test", refCancel, "--program", cand)
			if got.Program != cand || got.Taken != 1 {
				t.Fatalf("candidate test %+v, want 1 taken (evt_sub)", got)
			}
			for _, d := range got.Deliveries {
				if d.Taken && (d.EventID != "evt_sub" || len(d.Steps) != 1 || d.Steps[0].Input["subscription"] != "sub_1") {
					t.Errorf("candidate tried %+v, want evt_sub taken, input sub_1", d)
				}
			}
			// Of a trigger the program lacks: refused, naming it.
			if out, err := w.run("triggers", "test", refCancel); err == nil || !strings.Contains(out, "NotFound") {
				t.Errorf("test of a trigger the running program lacks: %v\n%s", err, out)
			}
			// A candidate that does not load: refused as a reload would be.
			bad := filepath.Join(w.dir, "bad.air.json")
			os.WriteFile(bad, []byte(strings.Replace(program(invoiceRoute), "body.type ==", "body.type ===", 1)), 0o600)
			if out, err := w.run("triggers", "test", refInvoice, "--program", bad); err == nil || !strings.Contains(out, "ProgramInvalid") ||
				!strings.Contains(out, "$.triggers[1].filter[0].cel") {
				t.Errorf("a candidate that does not load: %v\n%s", err, out)
			}
			// Nothing was enqueued, nothing called.
			for ref, list := range w.entries() {
				if len(list) != len(before[ref]) {
					t.Errorf("%s: %d entries after the tests, %d before", ref, len(list), len(before[ref]))
				}
			}
			if n := len(w.r.calls("InvoicePaid")); n != calls {
				t.Errorf("InvoicePaid called %d times after the tests, %d before", n, calls)
			}
		})
	}
}
