package summary

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/touba/touba-trigger/trigger"
)

// flowSummary is what `check` prints of a trigger's flow control, one line
// per field set: allow_from, rate_limit, filter, concurrency, debounce or
// batch.
func flowSummary(t *trigger.Trigger) []string {
	var out []string
	if a := t.Source.AllowFrom; len(a) > 0 {
		list := make([]string, len(a))
		for i, p := range a {
			list[i] = p.String()
		}
		out = append(out, "allow_from="+strings.Join(list, ","))
	}
	if r := t.Source.RateLimit; r != nil {
		out = append(out, fmt.Sprintf("rate_limit=%s/s burst=%d", strconv.FormatFloat(r.PerSecond, 'f', -1, 64), r.Burst))
	}
	if len(t.Filter) > 0 {
		out = append(out, "filter: "+conditions(t.Filter))
	}
	if c := t.Concurrency; c != nil {
		key := c.KeyRef
		if c.KeyCEL != nil {
			key = "cel:" + c.KeyCEL.Source
		}
		out = append(out, fmt.Sprintf("concurrency key=%s max=%d", key, c.Max))
	}
	if g := t.Gather.Describe(); g != "" {
		out = append(out, g)
	}
	return out
}

// conditions is a filter as check prints it: its items and-ed.
func conditions(filter []trigger.Condition) string {
	conds := make([]string, len(filter))
	for i, c := range filter {
		conds[i] = condText(c)
	}
	return strings.Join(conds, " and ")
}

func condText(c trigger.Condition) string {
	switch {
	case c.CEL != nil:
		return "cel(" + c.CEL.Source + ")"
	case c.Exists != nil:
		if *c.Exists {
			return c.Pointer + " exists"
		}
		return c.Pointer + " absent"
	case c.In != nil:
		b, _ := json.Marshal(c.In)
		return c.Pointer + " in " + string(b)
	default:
		b, _ := json.Marshal(c.Equals)
		return c.Pointer + " == " + string(b)
	}
}

// printSchedule is check's summary of a schedule trigger: its cron, zone
// and catch_up, its steps and dispatch weight, and when it next ticks
// (local to its zone, and the event id that tick gets).
func printSchedule(w io.Writer, t *trigger.Trigger, sc *trigger.Schedule, now time.Time) {
	fmt.Fprintf(w, "  %s  schedule cron=%q timezone=%s catch_up=%s  steps=%d  weight=%d  (no HTTP route)\n",
		t.Ref, sc.Cron.String(), sc.Timezone, sc.CatchUp, len(t.Steps), t.Weight)
	next := sc.Cron.Next(now, sc.Location)
	fmt.Fprintf(w, "    next tick: %s  event_id=%s\n", next.In(sc.Location).Format(time.RFC3339), trigger.TickEventID(next))
	printLines(w, flowSummary(t))
}

// printLines prints a trigger's summary lines, indented under it.
func printLines(w io.Writer, lines []string) {
	for _, line := range lines {
		fmt.Fprintf(w, "    %s\n", line)
	}
}
