// Package report is what touba-trigger's operator commands (queue,
// deliveries, effects, triggers, storage) say of the admin API's answers:
// tables and detail views for a person, with every cell escaped and cut
// short so a hostile event id or body cannot break the layout or act on
// the terminal, or the answer itself as JSON with --json. Where a command
// changes how an entry runs again (queue replay --repin, queue resume
// --new-effects), it shows the plan of a dry run and asks first. It lives
// apart from cmd/touba-trigger, which keeps the flags and the wiring.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// JSON writes v indented, for --json: the admin API's own documents.
func JSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Answer prints an admin API answer v: nothing when err is set (the
// command refuses with it), JSON with asJSON, else text's view of it.
func Answer[T any](w io.Writer, asJSON bool, v T, err error, text func(io.Writer, T) error) error {
	if err != nil {
		return err
	}
	if asJSON {
		return JSON(w, v)
	}
	return text(w, v)
}

// table writes aligned columns; cells are made printable and cut short so
// a hostile event id or body cannot break the layout or the terminal.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, headers ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	if len(headers) > 0 {
		t.row(headers...)
	}
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = cell(c, 60)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// cell renders s on one line: control characters escaped, at most max
// runes, "-" when empty.
func cell(s string, max int) string {
	if s == "" {
		return "-"
	}
	var b strings.Builder
	n := 0
	for _, r := range s {
		if n >= max {
			b.WriteString("…")
			break
		}
		switch {
		case r == '\t' || r == '\n' || r == '\r' || r < 0x20 || r == 0x7f || r == utf8.RuneError,
			r >= 0x80 && r <= 0x9f,                                 // C1 controls (CSI as one byte, say)
			r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069: // bidi overrides
			fmt.Fprintf(&b, "%q", string(r))
		default:
			b.WriteRune(r)
		}
		n++
	}
	return b.String()
}

func ts(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return touba.FormatTime(t)
}

func tsp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return ts(*t)
}

// codeAndMessage joins an error code and its message for one cell.
func codeAndMessage(code, msg string) string {
	switch {
	case code == "":
		return msg
	case msg == "":
		return code
	}
	return code + ": " + msg
}

// printBody shows a stored body: its text when it is UTF-8, else base64,
// indented, cut at 4 KiB.
func printBody(w io.Writer, label string, b *admin.Body, purged bool) {
	switch {
	case b == nil && purged:
		fmt.Fprintf(w, "%-12s purged by retention (identity and digest kept)\n", label)
		return
	case b == nil:
		fmt.Fprintf(w, "%-12s not stored\n", label)
		return
	}
	text, kind := b.Text, "text"
	if text == "" && b.Bytes > 0 {
		text, kind = b.Base64, "base64"
	}
	cut := ""
	if len(text) > 4096 {
		text, cut = text[:4096], "\n  … (cut; --json prints it whole)"
	}
	fmt.Fprintf(w, "%-12s %d bytes, %s\n", label, b.Bytes, kind)
	for _, line := range strings.Split(text, "\n") {
		// A body is the sender's bytes: escape what a terminal would act on.
		fmt.Fprintf(w, "  %s\n", cell(line, len(line)+1))
	}
	if cut != "" {
		fmt.Fprintln(w, cut)
	}
}

// field prints one "name   value" line of a detail view.
func field(w io.Writer, name, value string) {
	fmt.Fprintf(w, "%-12s %s\n", name, cell(value, 200))
}
