package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// runQueue is `touba-trigger queue ls|show|replay|resume` (SPEC §6).
func runQueue(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	verb, args, fs, f, err := operatorVerb("queue", args, stderr, true, "ls", "show", "replay", "resume")
	if err != nil {
		return err
	}
	switch verb {
	case "resume":
		return runQueueResume(ctx, args, fs, f, stdout, stderr)
	case "ls":
		var flt admin.EntryFilter
		var search admin.SearchRequest
		var since time.Duration
		fs.StringVar(&flt.Status, "status", "", "pending, running, waiting, done, failed, parked, cancelled or merged")
		fs.StringVar(&flt.TriggerRef, "trigger", "", "trigger ref (trigger:NAME, or NAME)")
		fs.IntVar(&flt.Limit, "limit", 100, "most entries listed, newest first")
		fs.BoolVar(&flt.Held, "held", false, "only pending entries held back behind an earlier entry of their concurrency key")
		fs.BoolVar(&flt.Oldest, "oldest-first", false, "list in queue order, oldest first")
		fs.StringVar(&search.QueueID, "queue-id", "", "search: the entry with this queue id")
		fs.StringVar(&search.EventID, "event-id", "", "search: the entries of this event id (the identity index)")
		fs.StringVar(&search.Body, "body", "", "search: entries whose body holds VALUE at the JSON pointer, POINTER=VALUE (VALUE as JSON if it parses, else a string)")
		fs.DurationVar(&since, "since", 0, "search: only entries received in the last DURATION (default 24h for --body)")
		fs.IntVar(&search.MaxScan, "max-scan", 0, "search: most entries a body search examines (default 10000)")
		if pos, err := parseCLI(fs, args, false); err != nil {
			return err
		} else if len(pos) > 0 {
			return usageError{err: fmt.Errorf("queue ls takes no arguments, got %q", pos)}
		}
		if since < 0 {
			return usageError{err: errors.New("--since must not be negative")}
		}
		if search.QueueID != "" || search.EventID != "" || search.Body != "" || since > 0 {
			if flt.Held || flt.Oldest {
				return usageError{err: errors.New("--held and --oldest-first do not go with a search (--queue-id, --event-id, --body, --since)")}
			}
			if since > 0 {
				search.Since = time.Now().Add(-since)
			}
			search.TriggerRef, search.Status, search.Limit = flt.TriggerRef, flt.Status, flt.Limit
			return withReadSession(ctx, f, stderr, func(ctx context.Context, api admin.API) error {
				rep, err := api.Search(ctx, search)
				if err != nil || f.json {
					return orJSON(stdout, rep, err)
				}
				if err := printEntries(stdout, rep.Entries); err != nil {
					return err
				}
				printSearchFooter(stdout, rep)
				return nil
			})
		}
		return withReadSession(ctx, f, stderr, func(ctx context.Context, api admin.API) error {
			list, err := api.Entries(ctx, flt)
			if err != nil || f.json {
				return orJSON(stdout, list, err)
			}
			return printEntries(stdout, list)
		})
	case "show":
		pos, err := parseCLI(fs, args, false)
		if err != nil {
			return err
		} else if len(pos) != 1 {
			return usageError{err: errors.New("queue show takes one QUEUE_ID")}
		}
		return withReadSession(ctx, f, stderr, func(ctx context.Context, api admin.API) error {
			d, err := api.Entry(ctx, pos[0])
			if err != nil || f.json {
				return orJSON(stdout, d, err)
			}
			return printEntry(stdout, d)
		})
	}
	var req admin.ReplayRequest
	var since time.Duration
	fs.StringVar(&req.Status, "status", "", "replay every entry in this state: failed, parked or cancelled")
	fs.StringVar(&req.TriggerRef, "trigger", "", "with --status: only entries of this trigger")
	fs.StringVar(&req.Code, "code", "", "with --status: only entries that stopped with this error code")
	fs.DurationVar(&since, "since", 0, "with --status: only entries received in the last DURATION")
	fs.BoolVar(&req.DryRun, "dry-run", false, "with --status: say how many entries would be replayed, and change nothing")
	fs.StringVar(&req.Reason, "reason", "", "why, for the audit trail")
	fs.BoolVar(&req.IgnoreCancel, "ignore-cancel", false,
		"a parked entry asked to cancel while its step ran goes on instead of ending cancelled")
	fs.BoolVar(&req.Repin, "repin", false,
		"pin each entry to the running program's definition of its trigger (steps it completed are kept by id); says what it keeps and runs again, and asks")
	var yes bool
	fs.BoolVar(&yes, "yes", false, "with --repin: do not ask (needed when stdin is not a terminal)")
	pos, err := parseCLI(fs, args, false)
	if err != nil {
		return err
	}
	if req.Repin && !req.DryRun && !yes && !isTTY(os.Stdin) {
		return usageError{err: errors.New("--repin changes the definition the entries run under; stdin is not a terminal to ask on: " +
			"see the plan with --dry-run, then give --yes to confirm")}
	}
	if since < 0 {
		return usageError{err: errors.New("--since must not be negative")}
	} else if since > 0 {
		req.Since = time.Now().Add(-since)
	}
	req.IDs = pos
	return withSession(ctx, f, stderr, func(ctx context.Context, api admin.API) error {
		if req.Repin && !req.DryRun {
			dry := req
			dry.DryRun = true
			plan, err := api.ReplayEntries(ctx, dry)
			if err != nil {
				return err
			}
			printRepinPlans(stderr, plan.Items)
			if !yes && !confirm(os.Stdin, stderr, "Replay with --repin? [y/N] ") {
				return usageError{err: errors.New("not confirmed: nothing was replayed")}
			}
		}
		if req.Status != "" && !req.DryRun && !f.json {
			// Say how many first: a bulk replay may take a while.
			dry := req
			dry.DryRun = true
			if n, err := api.ReplayEntries(ctx, dry); err == nil && n.Matched > 0 {
				fmt.Fprintf(stdout, "replaying %d %s entries in batches of %d\n", n.Matched, req.Status, admin.ReplayBatch)
			}
		}
		rep, err := api.ReplayEntries(ctx, req)
		if err != nil {
			return err
		}
		if f.json {
			err = printJSON(stdout, rep)
		} else {
			printReplay(stdout, rep)
		}
		if err == nil && rep.Replayed == 0 && !rep.DryRun {
			// Nothing happened: say so with the exit code too.
			err = touba.Errorf(touba.ENothingReplayed, "nothing was replayed")
		}
		return err
	})
}

// printEntries is the table of `queue ls`.
func printEntries(w io.Writer, list []admin.Entry) error {
	// NODE only where nodes share a database (some entry names one).
	nodes := slices.ContainsFunc(list, func(e admin.Entry) bool { return e.Node != "" })
	// WAKE only where some entry waits in a durable step (SPEC §2.3).
	waits := slices.ContainsFunc(list, func(e admin.Entry) bool { return e.Status == touba.StatusWaiting })
	cols := []string{"QUEUE_ID", "STATUS", "ATTEMPTS", "TRIGGER", "EVENT_ID", "RECEIVED", "ERROR", "KEY"}
	if waits {
		cols = append(cols, "WAKE")
	}
	if nodes {
		cols = append(cols, "NODE")
	}
	t := newTable(w, cols...)
	for _, e := range list {
		row := []string{e.QueueID, e.Status, strconv.Itoa(e.Attempts), e.TriggerRef, e.EventID, ts(e.ReceivedAt), e.ErrorCode,
			keyColumn(e)}
		if waits {
			row = append(row, wakeColumn(e))
		}
		if nodes {
			row = append(row, e.Node)
		}
		t.row(row...)
	}
	return t.flush()
}

// printSearchFooter says how much a search examined, and whether it
// stopped before the end of its window.
func printSearchFooter(w io.Writer, rep *admin.SearchReport) {
	window := ""
	if !rep.Since.IsZero() {
		window = " received since " + ts(rep.Since)
	}
	if rep.More {
		fmt.Fprintf(w, "searched %d entries%s, more exist: narrow the window (--since), add --trigger or --status, or raise --max-scan\n",
			rep.Scanned, window)
		return
	}
	fmt.Fprintf(w, "searched %d entries%s, %d found\n", rep.Scanned, window, len(rep.Entries))
}

// orJSON prints v as JSON unless err is set.
func orJSON(w io.Writer, v any, err error) error {
	if err != nil {
		return err
	}
	return printJSON(w, v)
}

func printReplay(w io.Writer, rep *admin.ReplayReport) {
	if rep.Note != "" {
		fmt.Fprintln(w, rep.Note)
	}
	if rep.DryRun && rep.Matched > 0 {
		return // a bulk dry run: the count says it
	}
	if rep.DryRun {
		printRepinPlans(w, rep.Items)
	}
	for _, it := range rep.Items {
		if it.Replayed && len(rep.Items) > 100 {
			continue // a bulk replay lists what it did not do; the count says the rest
		}
		if rep.DryRun && it.Reason == "" {
			fmt.Fprintf(w, "%s  would be replayed (%s)\n", it.QueueID, it.Status)
			continue
		}
		if it.Merged != "" {
			fmt.Fprintf(w, "%s  carrier of merged entry %s: its gathering's run is replayed\n", it.QueueID, it.Merged)
		}
		if it.Replayed {
			fmt.Fprintf(w, "%s  replayed: %s -> %s\n", it.QueueID, it.From, it.Status)
			if it.Repin != nil {
				fmt.Fprintf(w, "%s  %s\n", strings.Repeat(" ", len(it.QueueID)), it.Repin)
			}
			if it.Hint != "" {
				fmt.Fprintf(w, "%s  %s\n", strings.Repeat(" ", len(it.QueueID)), it.Hint)
			}
			continue
		}
		fmt.Fprintf(w, "%s  not replayed: %s\n", it.QueueID, it.Reason)
		if it.Hint != "" {
			fmt.Fprintf(w, "%s  %s\n", strings.Repeat(" ", len(it.QueueID)), it.Hint)
		}
	}
	if rep.Batches > 1 {
		fmt.Fprintf(w, "%d of %d replayed, in %d batches\n", rep.Replayed, len(rep.Items), rep.Batches)
		return
	}
	fmt.Fprintf(w, "%d of %d replayed\n", rep.Replayed, len(rep.Items))
}

// printEntry is `queue show`: the entry, then its runs, steps, effects
// with their audit events, delivery history and operator events.
func printEntry(w io.Writer, d *admin.EntryDetail) error {
	field(w, "queue id", d.QueueID)
	field(w, "trigger", d.TriggerRef)
	field(w, "event id", d.EventID)
	field(w, "status", d.Status)
	if d.MergedInto != "" {
		field(w, "merged into", d.MergedInto)
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
	t = newTable(w, "  STEP", "AT", "OUTPUT")
	for _, s := range d.Steps {
		t.row("  "+s.StepID, ts(s.At), string(s.Output))
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

// wakeColumn is when a waiting entry wakes; "event" when it waits for an
// event with no timeout, "-" when it does not wait.
func wakeColumn(e admin.Entry) string {
	switch {
	case e.WakeAt != nil:
		return ts(*e.WakeAt)
	case e.Status == touba.StatusWaiting:
		return "on its event (no timeout)"
	}
	return "-"
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

// printRepinPlans says, before a replay with --repin, what each entry
// keeps and runs again under the running definition.
func printRepinPlans(w io.Writer, items []admin.ReplayItem) {
	for _, it := range items {
		if it.Repin == nil || it.Reason != "" {
			continue
		}
		p := it.Repin
		fmt.Fprintf(w, "%s  --repin: definition %s -> %s\n", it.QueueID, p.From, p.To)
		fmt.Fprintf(w, "    kept (read back, not run): %s\n", listOrNone(p.Kept))
		fmt.Fprintf(w, "    run again: %s\n", listOrNone(p.Again))
		if len(p.Dropped) > 0 {
			fmt.Fprintf(w, "    dropped (not in the running definition): %s\n", listOrNone(p.Dropped))
		}
	}
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}
