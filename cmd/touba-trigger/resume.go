package main

import (
	"context"
	"flag"
	"io"
	"os"
	"strings"

	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/cli"
	"github.com/touba/touba-trigger/report"
)

// runQueueResume is `touba-trigger queue resume QUEUE_ID --from STEP
// [--new-effects] [--reason TEXT] [--yes]` (SPEC §6): the entry runs
// again from STEP with its queue id. --new-effects makes the writes of
// STEP and the later steps happen again, so the command says so first
// and asks on a terminal (y/N); off a terminal (a script, a pipe) it
// needs --yes instead, never a guess.
func runQueueResume(ctx context.Context, args []string, fs *flag.FlagSet, f *cli.Operator, stdout, stderr io.Writer) error {
	var req admin.ResumeRequest
	var yes bool
	fs.StringVar(&req.From, "from", "", "the step to run again from; it and every later step run again (required)")
	fs.BoolVar(&req.NewEffects, "new-effects", false,
		"give STEP and the later steps new effect identities (<queue_id>:<step>#<n>), so their writes happen again")
	fs.StringVar(&req.Reason, "reason", "", "why, for the audit trail")
	fs.BoolVar(&yes, "yes", false, "with --new-effects: do not ask (needed when stdin is not a terminal)")
	fs.BoolVar(&req.IgnoreCancel, "ignore-cancel", false,
		"a parked entry asked to cancel while its step ran is resumed instead of ending cancelled")
	fs.BoolVar(&req.Repin, "repin", false,
		"pin the entry to the running program's definition of its trigger; says what it keeps and runs again, and asks")
	pos, err := f.Parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 1:
		return cli.Usagef("queue resume takes one QUEUE_ID and --from STEP")
	case strings.TrimSpace(req.From) == "":
		return cli.Usagef("queue resume needs --from STEP: the step to run again from")
	case req.Repin && !yes && !cli.IsTTY(os.Stdin):
		return cli.Usagef("--repin changes the definition the entry runs under; stdin is not a terminal to ask on: give --yes to confirm")
	case req.NewEffects && !yes && !cli.IsTTY(os.Stdin):
		// Refused before anything is opened: nobody is there to ask.
		return cli.Usagef("--new-effects gives %s and every later step new effect identities, so their writes happen again; "+
			"stdin is not a terminal to ask on: give --yes to confirm", req.From)
	}
	req.QueueID = pos[0]
	return f.Session(ctx, stderr, func(ctx context.Context, api admin.API) error {
		return report.Resume(ctx, api, req, yes, report.Streams{In: os.Stdin, Out: stdout, Err: stderr, JSON: f.JSON})
	})
}
