package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/server"
	"github.com/touba/touba-trigger/trigger"
)

// HistoryWarnings (SPEC §8.1): check and start-up warn where --history is
// shorter than a wait_for timeout (or a wait has none) and than
// --retention for a schedule that catches up; nothing under --history 0,
// nothing when the window is long enough.
func TestHistoryWarnings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(path, []byte(`{"air_version": "touba-air-v1", "triggers": [
	  {"ref": "trigger:a", "source": {"kind": "webhook"}, "steps": [
	    {"id": "w", "wait_for": {"trigger": "trigger:b", "match": "x", "on": "/body/id", "timeout_ms": 864000000}},
	    {"id": "n", "wait_for": {"trigger": "trigger:b", "match": "x", "on": "/body/id"}}]},
	  {"ref": "trigger:b", "source": {"kind": "webhook"}, "steps": []},
	  {"ref": "trigger:s", "source": {"kind": "schedule", "cron": "0 3 * * *", "catch_up": "all"}, "steps": []},
	  {"ref": "trigger:s2", "source": {"kind": "schedule", "cron": "0 3 * * *", "catch_up": "none"}, "steps": []}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := trigger.LoadProgram(path)
	if err != nil {
		t.Fatal(err)
	}
	week := 168 * time.Hour
	got := strings.Join(server.HistoryWarnings(p, 72*time.Hour, week), "\n")
	for _, want := range []string{"trigger:a: step w waits for trigger:b with timeout 240h0m0s, longer than --history 72h0m0s",
		"trigger:a: step n waits for trigger:b with timeout none", "trigger:s: catch_up all looks back --retention 168h0m0s"} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "trigger:s2") || strings.Count(got, "\n") != 2 {
		t.Errorf("want 3 warnings, none for catch_up none:\n%s", got)
	}
	if w := server.HistoryWarnings(p, 0, week); len(w) != 0 {
		t.Errorf("--history 0 warned: %v", w)
	}
	if w := server.HistoryWarnings(p, 90*24*time.Hour, week); len(w) != 1 {
		t.Errorf("--history 90 days: %v, want the wait with no timeout only", w)
	}
}
