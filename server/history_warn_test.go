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
// shorter than a wait_for timeout (or a wait has none) and than twice a
// schedule's period, whatever its catch_up; nothing under --history 0,
// nothing when the window is long enough.
func TestHistoryWarnings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(path, []byte(`{"air_version": "touba-air-v1", "triggers": [
	  {"ref": "trigger:a", "source": {"kind": "webhook"}, "steps": [
	    {"id": "w", "wait_for": {"trigger": "trigger:b", "match": "x", "on": "/body/id", "timeout_ms": 864000000}},
	    {"id": "n", "wait_for": {"trigger": "trigger:b", "match": "x", "on": "/body/id"}}]},
	  {"ref": "trigger:b", "source": {"kind": "webhook"}, "steps": []},
	  {"ref": "trigger:s", "source": {"kind": "schedule", "cron": "0 3 * * 1", "catch_up": "all"}, "steps": []},
	  {"ref": "trigger:s2", "source": {"kind": "schedule", "cron": "0 3 * * *", "catch_up": "none"}, "steps": []},
	  {"ref": "trigger:m", "source": {"kind": "schedule", "cron": "* * * * *"}, "steps": []}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := trigger.LoadProgram(path)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(server.HistoryWarnings(p, 72*time.Hour), "\n")
	for _, want := range []string{"trigger:a: step w waits for trigger:b with timeout 240h0m0s, longer than --history 72h0m0s",
		"trigger:a: step n waits for trigger:b with timeout none",
		`trigger:s: --history 72h0m0s is shorter than twice the period 168h0m0s of its schedule "0 3 * * 1"`} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "trigger:s2") || strings.Contains(got, "trigger:m") || strings.Count(got, "\n") != 2 {
		t.Errorf("want 3 warnings, none for the daily and the per-minute schedules:\n%s", got)
	}
	if w := server.HistoryWarnings(p, 0); len(w) != 0 {
		t.Errorf("--history 0 warned: %v", w)
	}
	if w := server.HistoryWarnings(p, 90*24*time.Hour); len(w) != 1 {
		t.Errorf("--history 90 days: %v, want the wait with no timeout only", w)
	}
	// The case: a per-minute schedule under --history 15s; and a
	// daily one (whose longest day has 25 hours in a zone with DST) under
	// a day.
	got = strings.Join(server.HistoryWarnings(p, 15*time.Second), "\n")
	for _, want := range []string{`trigger:m: --history 15s is shorter than twice the period 1m0s of its schedule "* * * * *"`,
		`trigger:s2: --history 15s is shorter than twice the period 24h0m0s`} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings under --history 15s lack %q:\n%s", want, got)
		}
	}
}
