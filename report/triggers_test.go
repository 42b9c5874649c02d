package report_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/report"
)

// columns splits a table printed by report.Triggers into its cells by the
// headers' positions (cells may hold spaces), keyed by header.
func columns(tb testing.TB, out string) []map[string]string {
	tb.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	head := strings.Fields(lines[0])
	starts := make([]int, len(head))
	for i, h := range head {
		starts[i] = strings.Index(lines[0], h)
	}
	var rows []map[string]string
	for _, line := range lines[1:] {
		row := map[string]string{}
		for i, h := range head {
			end := len(line)
			if i+1 < len(starts) && starts[i+1] < end {
				end = starts[i+1]
			}
			if starts[i] < end {
				row[h] = strings.TrimSpace(line[starts[i]:end])
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// triggers ls prints each trigger's dispatch weight, "-" for a trigger
// the running program lacks, its runnable and running entries and its
// held ones with their reasons in short; --json carries the weight as
// "weight" and each count apart.
func TestTriggersTablePrintsTheWeight(t *testing.T) {
	rows := []admin.Trigger{
		{TriggerRef: "trigger:a", InProgram: true, Weight: 40, Pending: 13, Runnable: 3, Running: 5, Held: 2, HeldSlot: 10},
		{TriggerRef: "trigger:b", InProgram: true, Weight: 10, Paused: true, PausedBy: "ops",
			PausedAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), Reason: "maintenance", Pending: 4, HeldPaused: 3, HeldCircuit: 1},
		{TriggerRef: "trigger:gone", Pending: 1, Runnable: 1, Waiting: 2},
	}
	var out bytes.Buffer
	if err := report.Triggers(&out, rows); err != nil {
		t.Fatal(err)
	}
	if head := strings.Fields(strings.SplitN(out.String(), "\n", 2)[0]); strings.Join(head, " ") !=
		"TRIGGER STATE WEIGHT RUNNABLE RUNNING HELD WAITING OPEN_CIRCUITS PAUSED_BY REASON" {
		t.Fatalf("headers %q", head)
	}
	got := columns(t, out.String())
	if len(got) != 3 {
		t.Fatalf("%d rows, want 3:\n%s", len(got), out.String())
	}
	for i, want := range []map[string]string{
		{"TRIGGER": "trigger:a", "STATE": "active", "WEIGHT": "40", "RUNNABLE": "3", "RUNNING": "5", "HELD": "12 (slot 10, key 2)", "WAITING": "0"},
		{"TRIGGER": "trigger:b", "STATE": "paused", "WEIGHT": "10", "RUNNABLE": "0", "RUNNING": "0", "HELD": "4 (paused 3, circuit 1)",
			"PAUSED_BY": "ops 2026-03-01T12:00:00.000Z", "REASON": "maintenance"},
		{"TRIGGER": "trigger:gone", "STATE": "active (not in program)", "WEIGHT": "-", "RUNNABLE": "1", "HELD": "-", "WAITING": "2"},
	} {
		for col, v := range want {
			if got[i][col] != v {
				t.Errorf("row %d %s=%q, want %q\n%s", i, col, got[i][col], v, out.String())
			}
		}
	}

	var js bytes.Buffer
	if err := report.JSON(&js, rows); err != nil {
		t.Fatal(err)
	}
	var back []map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if got, want := back[0]["weight"], float64(40); got != want {
		t.Errorf("--json weight=%v, want %v", got, want)
	}
	if got, want := back[0]["runnable"], float64(3); got != want {
		t.Errorf("--json runnable=%v, want %v", got, want)
	}
	if got, want := back[0]["held_slot"], float64(10); got != want {
		t.Errorf("--json held_slot=%v, want %v", got, want)
	}
	if _, ok := back[2]["weight"]; ok {
		t.Errorf("--json gives a weight to a trigger not in the program: %s", js.String())
	}
}
