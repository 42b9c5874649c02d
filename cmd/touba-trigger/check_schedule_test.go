package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/trigger"
)

const scheduleCheckProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:nightly/Report", "source": {"kind": "schedule", "cron": "30 2 * * *", "timezone": "Europe/Paris", "catch_up": "all"},
   "steps": [{"id": "s", "tool": "tool:t/Do"}]}]}`

// check summarises a schedule trigger and when it next ticks.
func TestCheckPrintsTheNextTick(t *testing.T) {
	out := checkOutput(t, scheduleCheckProgram)
	if !strings.Contains(out, `trigger:nightly/Report  schedule cron="30 2 * * *" timezone=Europe/Paris catch_up=all  steps=1  weight=10  (no HTTP route)`) ||
		!strings.Contains(out, "next tick: ") {
		t.Fatalf("check output:\n%s", out)
	}
	p, err := trigger.ParseProgram("p.json", []byte(scheduleCheckProgram))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	// The day Paris springs forward: 02:30 does not exist, the tick is
	// at 03:00 CEST.
	printSchedule(&b, p.Triggers[0], p.Triggers[0].Source.Schedule, time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC))
	if got, want := b.String(), "    next tick: 2026-03-29T03:00:00+02:00  event_id=2026-03-29T01:00:00Z\n"; !strings.HasSuffix(got, want) {
		t.Fatalf("printed\n%s\nwant it to end with\n%s", got, want)
	}
}

// check refuses a bad schedule as bad configuration (exit 2).
func TestCheckRefusesABadSchedule(t *testing.T) {
	dir := t.TempDir()
	pp, mp := filepath.Join(dir, "p.json"), filepath.Join(dir, "m.json")
	bad := strings.Replace(scheduleCheckProgram, `"timezone": "Europe/Paris"`, `"timezone": "Mars/Olympus"`, 1)
	os.WriteFile(pp, []byte(bad), 0o600)
	os.WriteFile(mp, []byte(`{"manifest_version": "touba-manifest-v1", "bindings": {
	  "tool:t/Do": {"handler": {"kind": "accounting_stub"}, "effect_contract": {"kind": "none"}}}}`), 0o600)
	var out, errOut bytes.Buffer
	err := runCheck(context.Background(), []string{"--manifest", mp, pp}, &out, &errOut)
	if touba.ErrorCode(err) != touba.ECONFIG || !strings.Contains(err.Error(), `$.triggers[0].source.timezone: unknown time zone "Mars/Olympus"`) {
		t.Fatalf("check of an unknown time zone: %v", err)
	}
}
