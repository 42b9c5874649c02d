package report

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/cli"
)

// Resume is `queue resume` once its flags are read. With --new-effects
// or --repin it first says which writes happen again or what the entry
// keeps (a dry run) and asks, unless yes; then it resumes and says what
// it did. A step the trigger lacks is refused with the nearest one.
func Resume(ctx context.Context, api admin.API, req admin.ResumeRequest, yes bool, s Streams) error {
	if req.NewEffects || req.Repin {
		dry := req
		dry.DryRun = true
		rep, err := api.Resume(ctx, dry)
		if err != nil {
			return suggestStep(ctx, api, req, err)
		}
		if req.NewEffects {
			warnNewEffects(s.Err, rep)
		}
		if p := rep.Repin; p != nil {
			fmt.Fprintf(s.Err, "--repin: %s is pinned from definition %s to the running %s\n", req.QueueID, p.From, p.To)
			fmt.Fprintf(s.Err, "  kept (read back, not run): %s\n  run again: %s\n", listOrNone(p.Kept), listOrNone(p.Again))
			if len(p.Dropped) > 0 {
				fmt.Fprintf(s.Err, "  dropped (not in the running definition): %s\n", listOrNone(p.Dropped))
			}
		}
		if !yes && !cli.Confirm(s.In, s.Err, "Resume "+req.QueueID+" from "+req.From+"? [y/N] ") {
			return cli.UsageError{Err: errors.New("not confirmed: nothing was resumed")}
		}
	}
	rep, err := api.Resume(ctx, req)
	if err != nil {
		return suggestStep(ctx, api, req, err)
	}
	if s.JSON {
		return JSON(s.Out, rep)
	}
	printResume(s.Out, rep)
	return nil
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
	if near := cli.Closest(req.From, d.ResumeSteps); near != "" && near != req.From {
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
