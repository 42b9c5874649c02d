package report

import (
	"fmt"
	"io"
	"strconv"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// Storage is `storage`: the table of sizes, then the history window, the
// oldest entries and what the next --history pass frees.
func Storage(w io.Writer, rep *admin.StorageReport) error {
	return printStorage(w, rep, time.Now())
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
	fmt.Fprintf(w, "offers awaited:   %d", rep.Offers)
	if rep.OldestOffer != nil {
		fmt.Fprintf(w, ", the oldest %s", ageText(rep.OldestOffer, now, "made"))
	}
	fmt.Fprintln(w)
	if p := rep.LastPass; p != nil {
		fmt.Fprintf(w, "last pass:        %s: forgot %d entries, %d effects, dropped %d partitions, kept %d (%.3fs)",
			p.At.UTC().Format(time.RFC3339), p.Entries, p.Effects, p.Partitions, p.Kept, p.Took)
		if p.Skipped > 0 {
			fmt.Fprintf(w, "; %d steps skipped, the maintenance lock held elsewhere", p.Skipped)
		}
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
