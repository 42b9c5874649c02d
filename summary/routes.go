package summary

import (
	"fmt"
	"io"

	"github.com/touba/touba-trigger/trigger"
)

// printRoute is check's summary of a route (SPEC §2.4): the trigger whose
// deliveries it takes (it has no URL of its own), its steps and weight,
// and its filter and flow control.
func printRoute(w io.Writer, t *trigger.Trigger) {
	fmt.Fprintf(w, "  %s  route of %s (no URL: its deliveries are the ones %s accepts)  steps=%d  weight=%d\n",
		t.Ref, t.Source.From, t.Source.From, len(t.Steps), t.Weight)
	printLines(w, flowSummary(t))
}

// routesSummary is the line of an accepting trigger naming its routes,
// each with what takes a delivery there, and what its own entry does.
func routesSummary(t *trigger.Trigger) []string {
	if len(t.Routes) == 0 {
		return nil
	}
	out := []string{fmt.Sprintf("routes (%d), each fed in the transaction of this trigger's entry:", len(t.Routes))}
	for _, r := range t.Routes {
		filter := "every delivery"
		if len(r.Filter) > 0 {
			filter = "filter " + conditions(r.Filter)
		}
		out = append(out, fmt.Sprintf("  -> %s  %s", r.Ref, filter))
	}
	if len(t.Steps) == 0 && t.Gather == nil {
		out = append(out, "its own entries end done at once (no steps): each delivery runs in its routes")
	}
	return out
}

// printExpressions lists every CEL expression of the program (SPEC §2.4):
// where it stands (trigger, JSON path), its static cost estimate (the
// upper bound checked against --expression-cost-limit at load) and its
// text.
func printExpressions(w io.Writer, p *trigger.Program) {
	if len(p.Expressions) == 0 {
		return
	}
	limit := uint64(0)
	if p.Env != nil {
		limit = p.Env.Limit()
	}
	fmt.Fprintf(w, "expressions (%d; estimated cost, at most %d each by --expression-cost-limit):\n", len(p.Expressions), limit)
	for _, x := range p.Expressions {
		fmt.Fprintf(w, "  %s  %s  cost<=%d  %s\n", x.Trigger, x.Path, x.Expr.Cost, x.Expr.Source)
	}
}
