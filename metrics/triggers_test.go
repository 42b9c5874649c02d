package metrics_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/metrics"
)

// fakeCounts answers CountByTrigger and PausedTriggers with known values.
type fakeCounts struct {
	counts map[string]map[string]int64
	paused []string
	err    error
}

func (f *fakeCounts) CountByTrigger(context.Context) (map[string]map[string]int64, error) {
	return f.counts, f.err
}

func (f *fakeCounts) PausedTriggers(context.Context) ([]touba.TriggerPause, error) {
	var out []touba.TriggerPause
	for _, ref := range f.paused {
		out = append(out, touba.TriggerPause{TriggerRef: ref})
	}
	return out, nil
}

// The per-trigger gauges split each trigger's pending entries into
// runnable and held by reason, every reason written (0 included) for every
// trigger with active entries or in the program; the held runs by binding
// come from the dispatcher's count, every binding that can hold at 0.
func TestScrapeTriggersRunnableHeldRunning(t *testing.T) {
	m := metrics.New()
	m.WatchTriggers(&fakeCounts{paused: []string{"trigger:p"}, counts: map[string]map[string]int64{
		"trigger:a": {touba.StatusPending: 20, "held": 2, touba.HeldSlot: 10, touba.HeldCircuit: 3, touba.StatusRunning: 4,
			touba.StatusWaiting: 1},
		"trigger:p": {touba.StatusPending: 9, "held": 1, touba.HeldSlot: 2, touba.StatusRunning: 1},
	}}, func() []string { return []string{"trigger:a", "trigger:idle"} })
	m.WatchHeldRuns(func() map[string]int64 { return map[string]int64{"tool:busy": 12} },
		func() []string { return []string{"tool:busy", "tool:calm"} })
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	got := Scrape(t, srv.URL)

	for name, v := range map[string]float64{
		`touba_trigger_runnable_entries{trigger_ref="trigger:a"}`:                 5,
		`touba_trigger_running_entries{trigger_ref="trigger:a"}`:                  4,
		`touba_trigger_held_entries{reason="paused",trigger_ref="trigger:a"}`:     0,
		`touba_trigger_held_entries{reason="key",trigger_ref="trigger:a"}`:        2,
		`touba_trigger_held_entries{reason="slot",trigger_ref="trigger:a"}`:       10,
		`touba_trigger_held_entries{reason="circuit",trigger_ref="trigger:a"}`:    3,
		`touba_trigger_runnable_entries{trigger_ref="trigger:p"}`:                 0,
		`touba_trigger_running_entries{trigger_ref="trigger:p"}`:                  1,
		`touba_trigger_held_entries{reason="paused",trigger_ref="trigger:p"}`:     6,
		`touba_trigger_held_entries{reason="key",trigger_ref="trigger:p"}`:        1,
		`touba_trigger_held_entries{reason="slot",trigger_ref="trigger:p"}`:       2,
		`touba_trigger_held_entries{reason="circuit",trigger_ref="trigger:p"}`:    0,
		`touba_trigger_runnable_entries{trigger_ref="trigger:idle"}`:              0,
		`touba_trigger_running_entries{trigger_ref="trigger:idle"}`:               0,
		`touba_trigger_held_entries{reason="paused",trigger_ref="trigger:idle"}`:  0,
		`touba_trigger_held_entries{reason="key",trigger_ref="trigger:idle"}`:     0,
		`touba_trigger_held_entries{reason="slot",trigger_ref="trigger:idle"}`:    0,
		`touba_trigger_held_entries{reason="circuit",trigger_ref="trigger:idle"}`: 0,
		`touba_binding_held_runs{tool_ref="tool:busy"}`:                           12,
		`touba_binding_held_runs{tool_ref="tool:calm"}`:                           0,
	} {
		want(t, got, name, v)
	}
}

// A store that does not answer leaves the per-trigger gauges out of that
// scrape; the rest is still served.
func TestScrapeTriggersStoreDown(t *testing.T) {
	m := metrics.New()
	m.WatchTriggers(&fakeCounts{err: errors.New("database down")}, nil)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	got := Scrape(t, srv.URL)
	for name := range got {
		if strings.HasPrefix(name, "touba_trigger_") {
			t.Fatalf("sample %s from a store that does not answer", name)
		}
	}
	if _, ok := got["go_goroutines"]; !ok {
		t.Fatalf("the rest of the scrape is missing: %v", got)
	}
}
