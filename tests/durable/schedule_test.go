package durable_test

import (
	"encoding/json"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/internal/testkit"
)

// ticks lists the nightly trigger's entries, oldest first.
func (w *world) ticks() []admin.Entry {
	w.t.Helper()
	var es []admin.Entry
	w.cliJSON(&es, "queue", "ls", "--trigger", refNightly, "--oldest-first")
	return es
}

// waitTick waits for the tick entry with event id at least after and
// returns it, done.
func (w *world) waitTick(after time.Time) admin.Entry {
	w.t.Helper()
	var tick admin.Entry
	// A minute's cron: the tick comes within 60 s of the call.
	testkit.WaitFor(w.t, 150*time.Second, func() bool {
		for _, e := range w.ticks() {
			if at, err := time.Parse(time.RFC3339, e.EventID); err == nil && at.After(after) && e.Status == touba.StatusDone {
				tick = e
				return true
			}
		}
		return false
	}, "a tick after "+after.Format(time.RFC3339)+" to be done")
	return tick
}

// TestNightlyTickOneEntryAcrossRestart: flow (c), with the test copy
// ticking every minute. A tick is one entry whose event id is its time in
// RFC 3339 UTC and whose body names it; the daemon killed (SIGKILL) and
// started again within the tick's minute offers it again at most as a
// duplicate: one entry, one pull, and the next tick comes as its own.
func TestNightlyTickOneEntryAcrossRestart(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(p program) {
		p.trigger(refNightly)["source"] = map[string]any{"kind": "schedule", "cron": "* * * * *", "timezone": "UTC", "catch_up": "last"}
	})
	w.start()
	first := w.waitTick(time.Time{})
	at, _ := time.Parse(time.RFC3339, first.EventID)
	if first.EventID != at.UTC().Format(time.RFC3339) || at.Second() != 0 || at.Location() != time.UTC {
		t.Fatalf("tick event id %q, want the minute in RFC 3339 UTC", first.EventID)
	}
	e := w.show(first.QueueID)
	var body struct {
		ScheduledFor string `json:"scheduled_for"`
	}
	if e.Body == nil || json.Unmarshal([]byte(e.Body.Text), &body) != nil || body.ScheduledFor != first.EventID {
		t.Fatalf("tick body %+v, want {\"scheduled_for\": %q}", e.Body, first.EventID)
	}
	w.stop(syscall.SIGKILL)
	w.start()
	second := w.waitTick(at)

	seen := map[string]int{}
	for _, e := range w.ticks() {
		seen[e.EventID]++
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("tick %s has %d entries, want 1", id, n)
		}
	}
	for _, tick := range []admin.Entry{first, second} {
		c := w.once("pull", tick.QueueID)
		var in struct {
			ScheduledFor string `json:"scheduled_for"`
		}
		if json.Unmarshal(c.Input, &in) != nil || in.ScheduledFor != tick.EventID {
			t.Fatalf("pull of tick %s had input %s", tick.EventID, c.Input)
		}
	}
	pulls := map[string]int{}
	for _, c := range w.calls() {
		if c.Tool == "pull" {
			pulls[c.EffectID]++
		}
	}
	for id, n := range pulls {
		if n != 1 {
			t.Fatalf("pull effect %s was called %d times, want once", id, n)
		}
	}
}
