package report

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/touba/touba-trigger/admin"
)

// TriggerChange says what `triggers pause` or `triggers resume` did.
func TriggerChange(w io.Writer, r *admin.TriggerChange) error {
	switch {
	case r.Paused && r.Changed:
		fmt.Fprintf(w, "%s paused: its entries wait pending until `touba-trigger triggers resume %s`; intake still accepts\n", r.TriggerRef, r.TriggerRef)
	case r.Paused:
		fmt.Fprintf(w, "%s was already paused; nothing changed\n", r.TriggerRef)
	case r.Changed:
		fmt.Fprintf(w, "%s resumed: its pending entries run again\n", r.TriggerRef)
	default:
		fmt.Fprintf(w, "%s was not paused; nothing changed\n", r.TriggerRef)
	}
	return nil
}

// Triggers is the table of `triggers ls`: one row per trigger (a route
// under its accepting trigger, marked └), with
// its state, its dispatch weight, its runnable and running entries, its
// held ones with their reasons in short ("12 (slot 10, key 2)"), its
// waiting ones, its open circuits and who paused it and why. Runnable
// and held together are its pending entries; --json has each count.
func Triggers(w io.Writer, rows []admin.Trigger) error {
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
		if len(r.NoWorker) > 0 {
			state += " (no worker: " + strings.Join(r.NoWorker, ", ") + ")"
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
		name := r.TriggerRef
		if r.RouteOf != "" {
			// Under its accepting trigger (SPEC §2.4).
			name = "└ " + name
		}
		t.row(name, state, weight, strconv.FormatInt(r.Runnable, 10), strconv.FormatInt(r.Running, 10), r.HeldSummary(),
			strconv.FormatInt(r.Waiting, 10), circuits, by, reason)
	}
	return t.flush()
}
