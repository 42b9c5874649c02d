package main

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/cli"
	"github.com/touba/touba-trigger/report"
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
		if pos, err := f.Parse(fs, args); err != nil {
			return err
		} else if len(pos) > 0 {
			return cli.Usagef("queue ls takes no arguments, got %q", pos)
		}
		if since < 0 {
			return cli.Usagef("--since must not be negative")
		}
		if search.QueueID != "" || search.EventID != "" || search.Body != "" || since > 0 {
			if flt.Held || flt.Oldest {
				return cli.Usagef("--held and --oldest-first do not go with a search (--queue-id, --event-id, --body, --since)")
			}
			if since > 0 {
				search.Since = time.Now().Add(-since)
			}
			search.TriggerRef, search.Status, search.Limit = flt.TriggerRef, flt.Status, flt.Limit
			return f.ReadSession(ctx, stderr, func(ctx context.Context, api admin.API) error {
				rep, err := api.Search(ctx, search)
				return report.Answer(stdout, f.JSON, rep, err, report.Search)
			})
		}
		return f.ReadSession(ctx, stderr, func(ctx context.Context, api admin.API) error {
			list, err := api.Entries(ctx, flt)
			return report.Answer(stdout, f.JSON, list, err, report.Entries)
		})
	case "show":
		pos, err := f.Parse(fs, args)
		if err != nil {
			return err
		} else if len(pos) != 1 {
			return cli.Usagef("queue show takes one QUEUE_ID")
		}
		return f.ReadSession(ctx, stderr, func(ctx context.Context, api admin.API) error {
			d, err := api.Entry(ctx, pos[0])
			return report.Answer(stdout, f.JSON, d, err, report.Entry)
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
	pos, err := f.Parse(fs, args)
	if err != nil {
		return err
	}
	if req.Repin && !req.DryRun && !yes && !cli.IsTTY(os.Stdin) {
		return cli.Usagef("--repin changes the definition the entries run under; stdin is not a terminal to ask on: " +
			"see the plan with --dry-run, then give --yes to confirm")
	}
	if since < 0 {
		return cli.Usagef("--since must not be negative")
	} else if since > 0 {
		req.Since = time.Now().Add(-since)
	}
	req.IDs = pos
	return f.Session(ctx, stderr, func(ctx context.Context, api admin.API) error {
		return report.Replay(ctx, api, req, yes, report.Streams{In: os.Stdin, Out: stdout, Err: stderr, JSON: f.JSON})
	})
}
