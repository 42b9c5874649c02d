package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/touba/touba-trigger/admin"
)

// printGathering is the gathering part of `queue show` of a carrier
// (SPEC §2.1 debounce, batch): its state and times, then the deliveries
// its run sees, the carrier first, in order.
func printGathering(w io.Writer, d *admin.EntryDetail) {
	g := d.Gathering
	if g == nil {
		return
	}
	key := g.Value
	if key == "" {
		key = "(none: one gathering for the trigger)"
	}
	state := g.State
	if g.State == "open" && !g.Live {
		state = "open, no longer gathering (its carrier left it)"
	}
	fmt.Fprintf(w, "\ngathering (%s, key %s): %s, %d deliveries\n", g.Kind, key, state, g.Size)
	fmt.Fprintf(w, "  opened %s  last delivery %s  starts %s  deadline %s", ts(g.OpenedAt), ts(g.LastAt), ts(g.WakeAt), ts(g.Deadline))
	if g.StartedAt != nil {
		fmt.Fprintf(w, "  started %s", tsp(g.StartedAt))
	}
	fmt.Fprintln(w)
	t := newTable(w, "  #", "QUEUE_ID", "EVENT_ID", "RECEIVED", "BYTES")
	t.row("  1", d.QueueID+" (carrier)", d.EventID, ts(d.ReceivedAt), strconv.Itoa(d.BodyBytes))
	for i, m := range g.Merged {
		t.row("  "+strconv.Itoa(i+2), m.QueueID, m.EventID, ts(m.ReceivedAt), strconv.Itoa(m.BodyBytes))
	}
	t.flush()
}
