package summary

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/trigger"
)

const scheduleProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:nightly/Report", "source": {"kind": "schedule", "cron": "30 2 * * *", "timezone": "Europe/Paris", "catch_up": "all"},
   "steps": [{"id": "s", "tool": "tool:t/Do"}]}]}`

// A schedule's next tick is local to its zone, and the day the zone
// springs forward a tick in the missing hour moves to the hour after.
func TestScheduleNextTick(t *testing.T) {
	p, err := trigger.ParseProgram("p.json", []byte(scheduleProgram))
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
