package report

import (
	"fmt"
	"io"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// TriggerTest is `triggers test` (SPEC §2.4): what the trigger would do
// with each of its source's last deliveries, newest first: whether its
// filter takes it, the routes it would feed, its keys, each step's when
// and computed input, or the ExpressionFailed message; then the count.
func TriggerTest(w io.Writer, r *admin.TriggerTest) error {
	program := "the running program"
	if r.Program != "running" {
		program = "the candidate program " + r.Program
	}
	fmt.Fprintf(w, "%s of %s", r.TriggerRef, program)
	if r.RouteOf != "" {
		fmt.Fprintf(w, " (a route of %s)", r.RouteOf)
	}
	fmt.Fprintf(w, ", on the last deliveries of %s; nothing is enqueued, no tool is called\n", r.Source)
	for _, d := range r.Deliveries {
		where := "entry " + d.QueueID
		if d.DeliveryID != "" {
			where = "delivery " + d.DeliveryID + " (filtered at intake)"
		}
		fmt.Fprintf(w, "\n%s  event %s  %s\n", ts(d.ReceivedAt), cell(d.EventID, 200), where)
		fmt.Fprintf(w, "  %s\n", takenText(d))
		for _, k := range d.Keys {
			if k.Error != "" {
				fmt.Fprintf(w, "  key %s: %s: %s\n", k.Name, touba.EExpressionFailed, cell(k.Error, 300))
			} else {
				fmt.Fprintf(w, "  key %s = %s\n", k.Name, cell(keyText(k.Value), 300))
			}
		}
		for _, o := range d.Routes {
			if o.Fed {
				fmt.Fprintf(w, "  route %s: fed\n", o.TriggerRef)
			} else {
				fmt.Fprintf(w, "  route %s: not fed, %s\n", o.TriggerRef, cell(admin.RouteWhyNot(o), 300))
			}
		}
		for _, s := range d.Steps {
			fmt.Fprintf(w, "  step %s (%s): %s\n", s.ID, s.Kind, stepText(s))
		}
	}
	fmt.Fprintf(w, "\n%d deliveries tried, %d taken", len(r.Deliveries), r.Taken)
	if r.Skipped > 0 {
		fmt.Fprintf(w, ", %d skipped (body emptied by --retention or the delivery log's bounds)", r.Skipped)
	}
	fmt.Fprintln(w)
	return nil
}

// takenText says whether the filter takes a delivery, and if not why.
func takenText(d touba.TriedDelivery) string {
	switch {
	case d.Taken && d.Code == "":
		return "taken"
	case d.Taken:
		return "taken, but intake would refuse it (422): " + cell(codeAndMessage(d.Code, d.Message), 300)
	case d.Code == touba.IntakeFiltered:
		return "not taken: the filter of " + d.FilteredBy + " does not hold"
	}
	return "not taken: the filter of " + d.FilteredBy + " failed: " + cell(codeAndMessage(d.Code, d.Message), 300)
}

// keyText is a key's value, or what no value means.
func keyText(v string) string {
	if v == "" {
		return "(nothing: not limited, not gathered)"
	}
	return v
}

// stepText is what a tried step would do.
func stepText(s touba.TriedStep) string {
	when := ""
	if s.When != nil {
		when = "when true, "
	}
	switch {
	case s.Skipped:
		return "when false: skipped (output null, nothing journaled)"
	case s.NeedsOutput:
		return when + "reads the output of an earlier step, which a test does not call: " + cell(s.Error, 300)
	case s.Error != "":
		return when + cell(s.Error, 300)
	case s.Match != "":
		return when + "waits for the value " + cell(s.Match, 300)
	case s.Input != nil:
		return when + "input " + cell(string(s.Input), 2000)
	}
	return when + "runs"
}
