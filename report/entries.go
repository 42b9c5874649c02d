package report

import (
	"fmt"
	"io"
	"slices"
	"strconv"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// Entries is the table of `queue ls`.
func Entries(w io.Writer, list []admin.Entry) error {
	// NODE only where nodes share a database (some entry names one).
	nodes := slices.ContainsFunc(list, func(e admin.Entry) bool { return e.Node != "" })
	// WAKE only where some entry waits in a durable step (SPEC §2.3).
	waits := slices.ContainsFunc(list, func(e admin.Entry) bool { return e.Status == touba.StatusWaiting })
	cols := []string{"QUEUE_ID", "STATUS", "ATTEMPTS", "TRIGGER", "EVENT_ID", "RECEIVED", "ERROR", "KEY"}
	if waits {
		cols = append(cols, "WAKE")
	}
	if nodes {
		cols = append(cols, "NODE")
	}
	t := newTable(w, cols...)
	for _, e := range list {
		row := []string{e.QueueID, e.Status, strconv.Itoa(e.Attempts), e.TriggerRef, e.EventID, ts(e.ReceivedAt), e.ErrorCode,
			keyColumn(e)}
		if waits {
			row = append(row, wakeColumn(e))
		}
		if nodes {
			row = append(row, e.Node)
		}
		t.row(row...)
	}
	return t.flush()
}

// Search is `queue ls` with a search: the table of what it found, then
// how much it examined, and whether it stopped before the end of its
// window.
func Search(w io.Writer, rep *admin.SearchReport) error {
	if err := Entries(w, rep.Entries); err != nil {
		return err
	}
	window := ""
	if !rep.Since.IsZero() {
		window = " received since " + ts(rep.Since)
	}
	if rep.More {
		fmt.Fprintf(w, "searched %d entries%s, more exist: narrow the window (--since), add --trigger or --status, or raise --max-scan\n",
			rep.Scanned, window)
		return nil
	}
	fmt.Fprintf(w, "searched %d entries%s, %d found\n", rep.Scanned, window, len(rep.Entries))
	return nil
}

// keyColumn shows an entry's concurrency key, marked "(held)" while the
// entry waits behind an earlier one of that key.
func keyColumn(e admin.Entry) string {
	if e.ConcurrencyKey == "" {
		return "-"
	}
	if e.Held {
		return e.ConcurrencyKey + " (held)"
	}
	return e.ConcurrencyKey
}

// wakeColumn is when a waiting entry wakes: its own wake time, or for a
// debounce or batch carrier its gathering's (sooner if a batch fills, later
// if a debounce gets another delivery); "on its event (no timeout)" when
// it waits for an event with no timeout, "-" when it does not wait.
func wakeColumn(e admin.Entry) string {
	switch {
	case e.WakeAt != nil:
		return ts(*e.WakeAt)
	case e.Gathers != nil && e.Gathers.Kind == touba.GatherBatch:
		return ts(e.Gathers.WakeAt) + " (batch gathering, or when full)"
	case e.Gathers != nil:
		return ts(e.Gathers.WakeAt) + " (" + e.Gathers.Kind + " gathering)"
	case e.Status == touba.StatusWaiting:
		return "on its event (no timeout)"
	}
	return "-"
}
