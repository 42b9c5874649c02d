package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/admin"
)

// triggers ls prints each trigger's dispatch weight, "-" for a trigger
// the running program lacks; --json carries it as "weight".
func TestTriggersTablePrintsTheWeight(t *testing.T) {
	rows := []admin.Trigger{
		{TriggerRef: "trigger:a", InProgram: true, Weight: 40, Pending: 3},
		{TriggerRef: "trigger:b", InProgram: true, Weight: 10, Paused: true, PausedBy: "ops",
			PausedAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), Reason: "maintenance"},
		{TriggerRef: "trigger:gone", Pending: 1},
	}
	var out bytes.Buffer
	if err := printTriggers(&out, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if got, want := len(lines), 4; got != want {
		t.Fatalf("%d lines, want %d:\n%s", got, want, out.String())
	}
	for i, want := range [][]string{
		{"TRIGGER", "STATE", "WEIGHT", "PENDING"},
		{"trigger:a", "active", "40", "3"},
		{"trigger:b", "paused", "10", "0"},
		{"trigger:gone", "active", "(not", "in", "program)", "-", "1"},
	} {
		if got := strings.Fields(lines[i]); len(got) < len(want) || strings.Join(got[:len(want)], " ") != strings.Join(want, " ") {
			t.Errorf("line %d = %q, want it to begin with %q", i, lines[i], want)
		}
	}

	var js bytes.Buffer
	if err := printJSON(&js, rows); err != nil {
		t.Fatal(err)
	}
	var back []map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if got, want := back[0]["weight"], float64(40); got != want {
		t.Errorf("--json weight=%v, want %v", got, want)
	}
	if _, ok := back[2]["weight"]; ok {
		t.Errorf("--json gives a weight to a trigger not in the program: %s", js.String())
	}
}
