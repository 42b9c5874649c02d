package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/touba/touba-trigger/admin"
)

// runTriggers is `touba-trigger triggers ls | pause REF | resume REF`
// (SPEC §6): pausing holds a trigger's dispatch (its entries wait pending;
// intake still answers 202), persisted in the queue store, so it survives
// restarts and, on PostgreSQL, holds on every node.
func runTriggers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	verb, args, fs, f, err := operatorVerb("triggers", args, stderr, true, "ls", "pause", "resume")
	if err != nil {
		return err
	}
	if verb == "ls" {
		if pos, err := parseCLI(fs, args, false); err != nil {
			return err
		} else if len(pos) > 0 {
			return usageError{err: fmt.Errorf("triggers ls takes no arguments, got %q", pos)}
		}
		// A listing: with no daemon, read-only and without the lock (SPEC §6).
		return withReadSession(ctx, f, stderr, func(ctx context.Context, api admin.API) error {
			rows, err := api.Triggers(ctx)
			if err != nil || f.json {
				return orJSON(stdout, rows, err)
			}
			return printTriggers(stdout, rows)
		})
	}
	var req admin.TriggerRequest
	fs.StringVar(&req.Reason, "reason", "", "why, recorded in the audit trail with who asked")
	pos, err := parseCLI(fs, args, false)
	if err != nil {
		return err
	} else if len(pos) != 1 {
		return usageError{err: errors.New("triggers " + verb + " takes one trigger REF (trigger:NAME or NAME)")}
	}
	req.TriggerRef = pos[0]
	return withSession(ctx, f, stderr, func(ctx context.Context, api admin.API) error {
		change := api.PauseTrigger
		if verb == "resume" {
			change = api.ResumeTrigger
		}
		r, err := change(ctx, req)
		if err != nil || f.json {
			return orJSON(stdout, r, err)
		}
		switch {
		case r.Paused && r.Changed:
			fmt.Fprintf(stdout, "%s paused: its entries wait pending until `touba-trigger triggers resume %s`; intake still accepts\n", r.TriggerRef, r.TriggerRef)
		case r.Paused:
			fmt.Fprintf(stdout, "%s was already paused; nothing changed\n", r.TriggerRef)
		case r.Changed:
			fmt.Fprintf(stdout, "%s resumed: its pending entries run again\n", r.TriggerRef)
		default:
			fmt.Fprintf(stdout, "%s was not paused; nothing changed\n", r.TriggerRef)
		}
		return nil
	})
}

// printTriggers is the table of `triggers ls`: one row per trigger, with
// its state, its dispatch weight, its runnable and running entries, its
// held ones with their reasons in short ("12 (slot 10, key 2)"), its
// waiting ones, its open circuits and who paused it and why. Runnable
// and held together are its pending entries; --json has each count.
func printTriggers(w io.Writer, rows []admin.Trigger) error {
	t := newTable(w, "TRIGGER", "STATE", "WEIGHT", "RUNNABLE", "RUNNING", "HELD", "WAITING", "OPEN_CIRCUITS", "PAUSED_BY", "REASON")
	program := false // no program loaded (the files without --program): nothing to compare with
	for _, r := range rows {
		program = program || r.InProgram
	}
	for _, r := range rows {
		state := "active"
		if r.Paused {
			state = "paused"
		}
		if program && !r.InProgram {
			state += " (not in program)"
		}
		var open []string
		for _, c := range r.Circuits {
			open = append(open, c.ToolRef+" "+c.State)
		}
		circuits := "-"
		if len(open) > 0 {
			circuits = strings.Join(open, ", ")
		}
		by, reason := "-", "-"
		if r.Paused {
			by = r.PausedBy + " " + ts(r.PausedAt)
			if r.Reason != "" {
				reason = r.Reason
			}
		}
		weight := "-" // not in the running program, or none loaded
		if r.Weight > 0 {
			weight = strconv.Itoa(r.Weight)
		}
		t.row(r.TriggerRef, state, weight, strconv.FormatInt(r.Runnable, 10), strconv.FormatInt(r.Running, 10), r.HeldSummary(),
			strconv.FormatInt(r.Waiting, 10), circuits, by, reason)
	}
	return t.flush()
}
