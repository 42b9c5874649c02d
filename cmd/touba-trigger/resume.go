package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// runQueueResume is `touba-trigger queue resume QUEUE_ID --from STEP
// [--new-effects] [--reason TEXT] [--yes]` (SPEC §6): the entry runs
// again from STEP with its queue id. --new-effects makes the writes of
// STEP and the later steps happen again, so the command says so first
// and asks on a terminal (y/N); off a terminal (a script, a pipe) it
// needs --yes instead, never a guess.
func runQueueResume(ctx context.Context, args []string, fs *flag.FlagSet, f *cliFlags, stdout, stderr io.Writer) error {
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
	pos, err := parseCLI(fs, args, false)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 1:
		return usageError{err: errors.New("queue resume takes one QUEUE_ID and --from STEP")}
	case strings.TrimSpace(req.From) == "":
		return usageError{err: errors.New("queue resume needs --from STEP: the step to run again from")}
	case req.Repin && !yes && !isTTY(os.Stdin):
		return usageError{err: errors.New("--repin changes the definition the entry runs under; stdin is not a terminal to ask on: give --yes to confirm")}
	case req.NewEffects && !yes && !isTTY(os.Stdin):
		// Refused before anything is opened: nobody is there to ask.
		return usageError{err: fmt.Errorf("--new-effects gives %s and every later step new effect identities, so their writes happen again; "+
			"stdin is not a terminal to ask on: give --yes to confirm", req.From)}
	}
	req.QueueID = pos[0]
	return withSession(ctx, f, stderr, func(ctx context.Context, api admin.API) error {
		if req.NewEffects || req.Repin {
			dry := req
			dry.DryRun = true
			rep, err := api.Resume(ctx, dry)
			if err != nil {
				return suggestStep(ctx, api, req, err)
			}
			if req.NewEffects {
				warnNewEffects(stderr, rep)
			}
			if p := rep.Repin; p != nil {
				fmt.Fprintf(stderr, "--repin: %s is pinned from definition %s to the running %s\n", req.QueueID, p.From, p.To)
				fmt.Fprintf(stderr, "  kept (read back, not run): %s\n  run again: %s\n", listOrNone(p.Kept), listOrNone(p.Again))
				if len(p.Dropped) > 0 {
					fmt.Fprintf(stderr, "  dropped (not in the running definition): %s\n", listOrNone(p.Dropped))
				}
			}
			if !yes && !confirm(os.Stdin, stderr, "Resume "+req.QueueID+" from "+req.From+"? [y/N] ") {
				return usageError{err: errors.New("not confirmed: nothing was resumed")}
			}
		}
		rep, err := api.Resume(ctx, req)
		if err != nil {
			return suggestStep(ctx, api, req, err)
		}
		if f.json {
			return printJSON(stdout, rep)
		}
		printResume(stdout, rep)
		return nil
	})
}

// warnNewEffects says, before a resume with new effects, which writes
// will happen again.
func warnNewEffects(w io.Writer, rep *admin.ResumeReport) {
	fmt.Fprintf(w, "warning: --new-effects: steps %s get new effect identities, so their writes happen again,\n", strings.Join(rep.Steps, ", "))
	fmt.Fprintf(w, "even those the journal holds applied:\n")
	for _, st := range rep.Steps {
		fmt.Fprintf(w, "  %s  %s\n", st, rep.EffectIDs[st])
	}
	fmt.Fprintf(w, "without --new-effects an effect journaled applied is read back, not repeated.\n")
}

// confirm asks question on w and reads the answer from in: only y or yes
// confirms.
func confirm(in io.Reader, w io.Writer, question string) bool {
	fmt.Fprint(w, question)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(w)
		return false
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

// suggestStep adds "did you mean" to a refusal naming a step the
// entry's trigger does not have.
func suggestStep(ctx context.Context, api admin.API, req admin.ResumeRequest, err error) error {
	if touba.ErrorCode(err) != touba.EEntryNotResumable {
		return err
	}
	d, derr := api.Entry(ctx, req.QueueID)
	if derr != nil || len(d.ResumeSteps) == 0 {
		return err
	}
	if near := closest(req.From, d.ResumeSteps); near != "" && near != req.From {
		return fmt.Errorf("%w (did you mean --from %s?)", err, near)
	}
	return err
}

// printResume says what a resume did.
func printResume(w io.Writer, rep *admin.ResumeReport) {
	if rep.Status == touba.StatusCancelled {
		fmt.Fprintf(w, "%s  %s -> cancelled: a cancel was requested while its step ran, so nothing runs again\n", rep.QueueID, rep.Left)
		fmt.Fprintf(w, "  to run it from %s anyway: touba-trigger queue resume %s --from %s --ignore-cancel\n", rep.From, rep.QueueID, rep.From)
		return
	}
	fmt.Fprintf(w, "%s  resumed from %s: %s -> %s\n", rep.QueueID, rep.From, rep.Left, rep.Status)
	fmt.Fprintf(w, "  steps run again: %s (checked against %s)\n", strings.Join(rep.Steps, ", "), rep.Against)
	ids := rep.StepEffectIDs()
	if rep.NewEffects {
		fmt.Fprintf(w, "  new effect identities: %s: their writes happen again\n", strings.Join(ids, ", "))
		return
	}
	fmt.Fprintf(w, "  effect identities kept (%s): an effect journaled applied is read back, not repeated\n", strings.Join(ids, ", "))
}
