package admin_test

import (
	"context"
	"encoding/json"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// Triggers gives each trigger of the running program its dispatch weight,
// and none to a trigger known only from its entries.
func TestTriggersCarryTheWeight(t *testing.T) {
	f := mustFiles(t)
	f.entry(t, "e1", `{}`, touba.StatusPending) // of trigger:t, which the program lacks
	f.svc.ProgramTriggers = func() []admin.ProgramTrigger {
		return []admin.ProgramTrigger{{Ref: "trigger:heavy", Weight: 40}, {Ref: "trigger:plain", Weight: 10}}
	}
	got, err := f.svc.Triggers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"trigger:heavy": 40, "trigger:plain": 10, "trigger:t": 0}
	if len(got) != len(want) {
		t.Fatalf("Triggers=%+v, want %d rows", got, len(want))
	}
	for _, tr := range got {
		if w, ok := want[tr.TriggerRef]; !ok || tr.Weight != w {
			t.Errorf("%s: weight=%d, want %d", tr.TriggerRef, tr.Weight, w)
		}
	}
}

// countsQueue is the real queue with CountByTrigger answering known counts.
type countsQueue struct {
	*queue.Queue
	counts map[string]map[string]int64
}

func (q countsQueue) CountByTrigger(context.Context) (map[string]map[string]int64, error) {
	return q.counts, nil
}

// Triggers splits each trigger's pending entries into runnable and held by
// reason (paused, key, slot, circuit), and keeps pending as it was:
// pending entries but those held behind their key.
func TestTriggersSplitHeldByReason(t *testing.T) {
	f := mustFiles(t)
	f.svc.Queue = countsQueue{Queue: f.q, counts: map[string]map[string]int64{
		"trigger:busy": {touba.StatusPending: 20, "held": 2, touba.HeldSlot: 10, touba.HeldCircuit: 3,
			touba.StatusRunning: 4, touba.StatusWaiting: 1},
		"trigger:paused": {touba.StatusPending: 9, "held": 1, touba.HeldSlot: 2},
		"trigger:free":   {touba.StatusPending: 5, touba.StatusRunning: 2},
		"trigger:idle":   {touba.StatusWaiting: 3},
	}}
	if _, err := f.q.PauseTrigger(context.Background(), touba.TriggerPause{TriggerRef: "trigger:paused", Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	got, err := f.svc.Triggers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	type split struct{ Pending, Runnable, HeldPaused, Held, HeldSlot, HeldCircuit, Running, Waiting, Total int64 }
	want := map[string]split{
		"trigger:busy":   {Pending: 18, Runnable: 5, Held: 2, HeldSlot: 10, HeldCircuit: 3, Running: 4, Waiting: 1, Total: 15},
		"trigger:paused": {Pending: 8, HeldPaused: 6, Held: 1, HeldSlot: 2, Total: 9},
		"trigger:free":   {Pending: 5, Runnable: 5, Running: 2},
		"trigger:idle":   {Waiting: 3},
	}
	if len(got) != len(want) {
		t.Fatalf("Triggers=%+v, want %d rows", got, len(want))
	}
	for _, tr := range got {
		s := split{tr.Pending, tr.Runnable, tr.HeldPaused, tr.Held, tr.HeldSlot, tr.HeldCircuit, tr.Running, tr.Waiting, tr.HeldTotal()}
		if s != want[tr.TriggerRef] {
			t.Errorf("%s: %+v, want %+v", tr.TriggerRef, s, want[tr.TriggerRef])
		}
	}

	// The JSON names are snake_case; "held" stays the key's.
	b, err := json.Marshal(got[0]) // trigger:busy
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]float64{"pending": 18, "runnable": 5, "held_paused": 0, "held": 2, "held_slot": 10,
		"held_circuit": 3, "running": 4, "waiting": 1} {
		if m[name] != v {
			t.Errorf("json %q=%v, want %v in %s", name, m[name], v, b)
		}
	}
}

func TestTriggerHeldSummary(t *testing.T) {
	for _, c := range []struct {
		tr   admin.Trigger
		want string
	}{
		{admin.Trigger{}, "-"},
		{admin.Trigger{Held: 2, HeldSlot: 10}, "12 (slot 10, key 2)"},
		{admin.Trigger{HeldPaused: 6, Held: 1, HeldSlot: 2}, "9 (paused 6, slot 2, key 1)"},
		{admin.Trigger{Held: 3, HeldSlot: 3, HeldCircuit: 3}, "9 (key 3, slot 3, circuit 3)"},
		{admin.Trigger{HeldCircuit: 1}, "1 (circuit 1)"},
	} {
		if got := c.tr.HeldSummary(); got != c.want {
			t.Errorf("HeldSummary(%+v)=%q, want %q", c.tr, got, c.want)
		}
	}
}
