package main

import (
	"context"
	"io"

	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/cli"
	"github.com/touba/touba-trigger/report"
)

// runTriggers is `touba-trigger triggers ls | pause REF | resume REF |
// test REF` (SPEC §6): pausing holds a trigger's dispatch (its entries
// wait pending; intake still answers 202), persisted in the queue store,
// so it survives restarts and, on PostgreSQL, holds on every node; test
// tries a trigger on stored deliveries (SPEC §2.4, triggertest.go).
func runTriggers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	verb, args, fs, f, err := operatorVerb("triggers", args, stderr, true, "ls", "pause", "resume", "test")
	if err != nil {
		return err
	}
	if verb == "test" {
		return runTriggersTest(ctx, args, fs, f, stdout, stderr)
	}
	if verb == "ls" {
		if pos, err := f.Parse(fs, args); err != nil {
			return err
		} else if len(pos) > 0 {
			return cli.Usagef("triggers ls takes no arguments, got %q", pos)
		}
		// A listing: with no daemon, read-only and without the lock (SPEC §6).
		return f.ReadSession(ctx, stderr, func(ctx context.Context, api admin.API) error {
			rows, err := api.Triggers(ctx)
			return report.Answer(stdout, f.JSON, rows, err, report.Triggers)
		})
	}
	var req admin.TriggerRequest
	fs.StringVar(&req.Reason, "reason", "", "why, recorded in the audit trail with who asked")
	pos, err := f.Parse(fs, args)
	if err != nil {
		return err
	} else if len(pos) != 1 {
		return cli.Usagef("triggers %s takes one trigger REF (trigger:NAME or NAME)", verb)
	}
	req.TriggerRef = pos[0]
	return f.Session(ctx, stderr, func(ctx context.Context, api admin.API) error {
		change := api.PauseTrigger
		if verb == "resume" {
			change = api.ResumeTrigger
		}
		r, err := change(ctx, req)
		return report.Answer(stdout, f.JSON, r, err, report.TriggerChange)
	})
}
