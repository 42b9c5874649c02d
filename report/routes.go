package report

import (
	"fmt"
	"io"

	"github.com/touba/touba-trigger/admin"
)

// printRoutes is the routes part of `queue show` of an accepting trigger's
// entry (SPEC §2.4): each route of its trigger when it was accepted, the
// ones it fed with their entry and its status, the others with why not.
func printRoutes(w io.Writer, d *admin.EntryDetail) {
	if len(d.Routes) == 0 {
		return
	}
	fed := 0
	for _, r := range d.Routes {
		if r.Fed {
			fed++
		}
	}
	fmt.Fprintf(w, "\nroutes (%d, fed %d)\n", len(d.Routes), fed)
	t := newTable(w, "  ROUTE", "FED", "ENTRY", "STATUS", "WHY NOT")
	for _, r := range d.Routes {
		fedText, status, why := "no", r.Status, cell(admin.RouteWhyNot(r.RouteOutcome), 200)
		if r.Fed {
			fedText = "yes"
		}
		if status == "" && r.QueueID != "" && r.Fed {
			status = "(forgotten)"
		}
		t.row("  "+r.TriggerRef, fedText, r.QueueID, status, why)
	}
	t.flush()
}
