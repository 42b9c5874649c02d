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

// Streams are where a command that may ask talks: its answer to Out (as
// JSON with JSON set), plans and questions to Err, answers from In.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
	JSON     bool
}

// Replay is `queue replay` once its flags are read. With --repin it shows
// what each entry keeps and runs again (a dry run) and asks, unless yes;
// a bulk replay says first how many it replays; then it replays and says
// what it did. Nothing replayed is a refusal too (NothingReplayed), so
// the exit code says it.
func Replay(ctx context.Context, api admin.API, req admin.ReplayRequest, yes bool, s Streams) error {
	if req.Repin && !req.DryRun {
		dry := req
		dry.DryRun = true
		plan, err := api.ReplayEntries(ctx, dry)
		if err != nil {
			return err
		}
		printRepinPlans(s.Err, plan.Items)
		if !yes && !cli.Confirm(s.In, s.Err, "Replay with --repin? [y/N] ") {
			return cli.UsageError{Err: errors.New("not confirmed: nothing was replayed")}
		}
	}
	if req.Status != "" && !req.DryRun && !s.JSON {
		// Say how many first: a bulk replay may take a while.
		dry := req
		dry.DryRun = true
		if n, err := api.ReplayEntries(ctx, dry); err == nil && n.Matched > 0 {
			fmt.Fprintf(s.Out, "replaying %d %s entries in batches of %d\n", n.Matched, req.Status, admin.ReplayBatch)
		}
	}
	rep, err := api.ReplayEntries(ctx, req)
	if err != nil {
		return err
	}
	if s.JSON {
		err = JSON(s.Out, rep)
	} else {
		printReplay(s.Out, rep)
	}
	if err == nil && rep.Replayed == 0 && !rep.DryRun {
		// Nothing happened: say so with the exit code too.
		err = touba.Errorf(touba.ENothingReplayed, "nothing was replayed")
	}
	return err
}

// printReplay says what a replay did, or with --dry-run what it would do.
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
