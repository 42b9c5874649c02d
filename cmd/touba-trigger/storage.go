package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// runStorage is `touba-trigger storage` (SPEC §6, §8.1): the size of each
// file or table, the oldest entries, and what a --history pass would
// forget now; the running daemon's window and its last pass, or, with no
// daemon, the files' measure under --history.
func runStorage(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := &cliFlags{}
	fs := newFlagSet("storage", stderr)
	addCLIFlags(fs, f, true)
	var req admin.StorageRequest
	fs.DurationVar(&req.History, "history", 0, "the window to count what a pass forgets with (default: the daemon's --history; with no daemon, 2160h)")
	pos, err := parseCLI(fs, args, false)
	if err != nil {
		return err
	} else if len(pos) > 0 {
		return usageError{err: fmt.Errorf("storage takes no arguments, got %q", pos)}
	}
	if req.History < 0 {
		return usageError{err: fmt.Errorf("--history %s: must not be negative (0: the daemon's)", req.History)}
	}
	return withReadSession(ctx, f, stderr, func(ctx context.Context, api admin.API) error {
		rep, err := api.Storage(ctx, req)
		if err != nil || f.json {
			return orJSON(stdout, rep, err)
		}
		return printStorage(stdout, rep, time.Now())
	})
}

// printStorage is the table of `storage` and the lines under it.
func printStorage(w io.Writer, rep *admin.StorageReport, now time.Time) error {
	kind := "FILE"
	if rep.Backend == "postgres" {
		kind = "TABLE"
	}
	t := newTable(w, kind, "SIZE", "FREE_INSIDE", "PARTITIONS", "PATH")
	var total int64
	for _, s := range rep.Sizes {
		free, parts := "-", "-"
		if s.Free > 0 {
			free = admin.HumanBytes(s.Free)
		}
		if s.Partitions > 0 {
			parts = strconv.Itoa(s.Partitions)
		}
		t.row(s.Name, admin.HumanBytes(s.Bytes), free, parts, s.Path)
		total += s.Bytes
	}
	t.row("total", admin.HumanBytes(total), "", "", "")
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "history:          %s\n", historyText(rep.History))
	fmt.Fprintf(w, "oldest entry:     %s\n", ageText(rep.OldestEntry, now, "accepted"))
	fmt.Fprintf(w, "oldest finished:  %s\n", ageText(rep.OldestFinished, now, "accepted"))
	if rep.History > 0 {
		more := ""
		if rep.ForgettableCap {
			more = "+"
		}
		fmt.Fprintf(w, "next pass frees:  %d%s entries", rep.Forgettable, more)
		if rep.Partitions > 0 {
			fmt.Fprintf(w, " in %d partitions (%s)", rep.Partitions, admin.HumanBytes(rep.FreedBytes))
		}
		fmt.Fprintln(w)
	}
	if p := rep.LastPass; p != nil {
		fmt.Fprintf(w, "last pass:        %s: forgot %d entries, %d effects, dropped %d partitions, kept %d (%.3fs)",
			p.At.UTC().Format(time.RFC3339), p.Entries, p.Effects, p.Partitions, p.Kept, p.Took)
		if p.Error != "" {
			fmt.Fprintf(w, "; failed: %s", p.Error)
		}
		fmt.Fprintln(w)
	}
	if rep.Note != "" {
		fmt.Fprintf(w, "note: %s\n", rep.Note)
	}
	return nil
}

func historyText(d time.Duration) string {
	switch {
	case d <= 0:
		return "0 (keeps everything)"
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%s (%d days)", d, d/(24*time.Hour))
	}
	return d.String()
}

func ageText(t *time.Time, now time.Time, what string) string {
	if t == nil {
		return "none"
	}
	return fmt.Sprintf("%s %s ago (%s)", what, now.Sub(*t).Round(time.Second), t.UTC().Format(touba.TimeFormat))
}
