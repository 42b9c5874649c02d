package report

import (
	"fmt"
	"io"
	"strconv"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// Entry is `queue show`: the entry, then its runs, steps, effects
// with their audit events, delivery history and operator events.
func Entry(w io.Writer, d *admin.EntryDetail) error {
	field(w, "queue id", d.QueueID)
	field(w, "trigger", d.TriggerRef)
	field(w, "event id", d.EventID)
	field(w, "status", d.Status)
	if d.MergedInto != "" {
		field(w, "merged into", d.MergedInto)
	}
	if d.RoutedFrom != "" {
		field(w, "routed from", d.RoutedFrom+" (the accepting trigger's entry)")
	}
	if d.ErrorCode != "" || d.ErrorMessage != "" {
		field(w, "error", codeAndMessage(d.ErrorCode, d.ErrorMessage))
	}
	field(w, "attempts", d.AttemptsText())
	if d.Node != "" {
		field(w, "node", d.Node)
	}
	field(w, "received", ts(d.ReceivedAt))
	field(w, "updated", ts(d.UpdatedAt))
	if d.NotBefore != nil {
		field(w, "next try", tsp(d.NotBefore))
	}
	if g := d.Gathering; g != nil && g.Live {
		field(w, "starts", ts(g.WakeAt)+" (its gathering's time, unless it fills first)")
	} else if d.Status == touba.StatusWaiting {
		field(w, "wakes", wakeColumn(d.Entry))
	}
	field(w, "remote", d.RemoteAddr)
	field(w, "digest", d.Digest)
	if d.ProgramDigest != "" {
		field(w, "program", admin.ShortDigest(d.ProgramDigest))
	}
	printBody(w, "body", d.Body, d.BodyPurged)

	fmt.Fprintf(w, "\nruns (%d)\n", len(d.Runs))
	t := newTable(w, "  RUN_ID", "ATTEMPT", "STATUS", "STARTED", "ENDED", "ERROR")
	for _, r := range d.Runs {
		t.row("  "+r.RunID, strconv.Itoa(r.Attempt), r.Status, ts(r.StartedAt), tsp(r.EndedAt), codeAndMessage(r.ErrorCode, r.ErrorMessage))
	}
	t.flush()
	fmt.Fprintf(w, "\nstep outputs (%d)\n", len(d.Steps))
	t = newTable(w, "  STEP", "AT", "STATUS", "OUTPUT")
	for _, s := range d.Steps {
		status := s.Status
		if status == "" {
			status = "done"
		}
		t.row("  "+s.StepID, ts(s.At), status, string(s.Output))
	}
	t.flush()
	fmt.Fprintf(w, "\neffects (%d)\n", len(d.Effects))
	for _, e := range d.Effects {
		fmt.Fprintf(w, "  %s  %s %s  %s  attempts=%d  retry_mode=%s\n", cell(e.EffectID, 120), e.Operation, e.ToolRef, e.State, e.Attempts, e.RetryMode)
		if e.ReceiptRef != "" || e.ErrorCode != "" || e.ReceiptErrorCode != "" {
			fmt.Fprintf(w, "    receipt=%s error=%s receipt_error=%s\n", cell(e.ReceiptRef, 80), cell(e.ErrorCode, 60), cell(e.ReceiptErrorCode, 60))
		}
		if e.Request != "" {
			fmt.Fprintf(w, "    request %s\n", cell(e.Request, 300))
		}
		if len(e.Result) > 0 {
			fmt.Fprintf(w, "    result %s\n", cell(string(e.Result), 200))
		}
		for _, ev := range e.Events {
			fmt.Fprintf(w, "    %s  %-11s %s\n", ts(ev.At), ev.State, cell(ev.Detail, 160))
		}
	}
	printWaits(w, d)
	printGathering(w, d)
	printRoutes(w, d)
	fmt.Fprintf(w, "\ndeliveries naming this entry (%d)\n", len(d.Deliveries))
	t = newTable(w, "  DELIVERY_ID", "AT", "STATUS", "CODE", "REMOTE")
	for _, r := range d.Deliveries {
		t.row("  "+r.DeliveryID, ts(r.At), strconv.Itoa(r.StatusCode), r.ErrorCode, r.RemoteAddr)
	}
	t.flush()
	fmt.Fprintf(w, "\noperator events (%d)\n", len(d.Operator))
	t = newTable(w, "  AT", "ACTION", "OUTCOME", "OPERATOR", "DETAIL", "REASON")
	for _, ev := range d.Operator {
		t.row("  "+ts(ev.At), ev.Action, ev.Outcome, ev.Operator, ev.Detail, ev.Reason)
	}
	t.flush()
	if len(d.Next) > 0 {
		fmt.Fprintln(w, "\nnext")
		for _, n := range d.Next {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	return nil
}

// printWaits is the waits part of `queue show`: the entry's sleeps and
// waits for events, and the waits of other entries its delivery matched.
func printWaits(w io.Writer, d *admin.EntryDetail) {
	if len(d.Waits) > 0 {
		fmt.Fprintf(w, "\nwaits (%d)\n", len(d.Waits))
		t := newTable(w, "  STEP", "KIND", "STATE", "TIMEOUT", "SINCE", "RESOLVED", "MATCHED")
		for _, x := range d.Waits {
			t.row("  "+x.StepID, x.Kind, x.State, x.Timeout(), ts(x.CreatedAt), tsp(x.ResolvedAt), x.MatchedQueueID)
		}
		t.flush()
		// What each awaits, whole: a trigger ref, a value and a pointer
		// are each as long as the user made them, and a cut one is no use.
		for _, x := range d.Waits {
			fmt.Fprintf(w, "  %s awaits %s\n", x.StepID, cell(x.Awaits(), 1000))
		}
	}
	if len(d.MatchedWaits) > 0 {
		fmt.Fprintf(w, "\nwaits this delivery matched (%d)\n", len(d.MatchedWaits))
		for _, x := range d.MatchedWaits {
			fmt.Fprintf(w, "  this delivery matched the wait %s of %s (at %s)\n", x.StepID, x.QueueID, tsp(x.ResolvedAt))
		}
	}
}

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
