package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
)

const scheduleCheckProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:nightly/Report", "source": {"kind": "schedule", "cron": "30 2 * * *", "timezone": "Europe/Paris", "catch_up": "all"},
   "steps": [{"id": "s", "tool": "tool:t/Do"}]}]}`

// check summarises a schedule trigger and when it next ticks (the
// tick itself: summary/schedule_test.go).
func TestCheckPrintsTheNextTick(t *testing.T) {
	out := checkOutput(t, scheduleCheckProgram)
	if !strings.Contains(out, `trigger:nightly/Report  schedule cron="30 2 * * *" timezone=Europe/Paris catch_up=all  steps=1  weight=10  (no HTTP route)`) ||
		!strings.Contains(out, "next tick: ") {
		t.Fatalf("check output:\n%s", out)
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
