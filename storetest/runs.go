package storetest

import (
	"encoding/json"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Run checkpoints: a re-run (after a crash or a replay) starts after the
// last step that has an output, so a checkpoint is durable when SaveStep
// returns and never replaced; run history is for operators.
func runRuns(t *testing.T, f Factory) {
	t.Run("SaveStepAndSteps", func(t *testing.T) { testSaveStep(t, f) })
	t.Run("FirstSaveWins", func(t *testing.T) { testFirstSaveWins(t, f) })
	t.Run("StepsSurviveRestart", func(t *testing.T) { testStepsDurable(t, f) })
	t.Run("RecordRunAndRuns", func(t *testing.T) { testRecordRun(t, f) })
}

// steps reads the checkpoints of an entry.
func (e *env) steps(t *testing.T, queueID string) map[string]touba.StepOutput {
	t.Helper()
	got, err := e.State.Steps(e.ctx, queueID)
	if err != nil {
		t.Fatalf("steps of %s: %v", queueID, err)
	}
	return got
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(t *testing.T, got, want json.RawMessage) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("stored JSON %q: %v", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("wanted JSON %q: %v", want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	return string(gb) == string(wb)
}

func testSaveStep(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	if got := e.steps(t, "q1"); len(got) != 0 {
		t.Fatalf("steps of an entry without checkpoints: %v", got)
	}
	outputs := map[string]json.RawMessage{
		"charge": json.RawMessage(`{"id":42,"items":["a","b"]}`),
		"notify": json.RawMessage(`null`),
		"label":  json.RawMessage(`"text"`),
	}
	for _, id := range []string{"charge", "notify", "label"} {
		if err := e.State.SaveStep("q1", 0, id, "run-1", outputs[id]); err != nil {
			t.Fatalf("save %s: %v", id, err)
		}
		e.clock.Add(time.Second)
	}
	if err := e.State.SaveStep("q2", 0, "charge", "run-2", json.RawMessage(`{"id":7}`)); err != nil {
		t.Fatal(err)
	}
	got := e.steps(t, "q1")
	if len(got) != 3 {
		t.Fatalf("%d steps of q1, want 3 (and none of q2)", len(got))
	}
	for i, id := range []string{"charge", "notify", "label"} {
		so := got[id]
		if so.StepID != id || so.RunID != "run-1" || !jsonEqual(t, so.Output, outputs[id]) ||
			!so.At.Equal(Epoch.Add(time.Duration(i)*time.Second)) {
			t.Fatalf("step %s: %+v", id, so)
		}
	}
	if q2 := e.steps(t, "q2"); len(q2) != 1 || !jsonEqual(t, q2["charge"].Output, json.RawMessage(`{"id":7}`)) {
		t.Fatalf("steps of q2: %+v", q2)
	}
}

// testFirstSaveWins: a step is checkpointed once; a later run's save of
// the same step (a replay racing a stale run) keeps the first output.
func testFirstSaveWins(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	if err := e.State.SaveStep("q1", 0, "charge", "run-1", json.RawMessage(`{"id":1}`)); err != nil {
		t.Fatal(err)
	}
	e.clock.Add(time.Second)
	if err := e.State.SaveStep("q1", 0, "charge", "run-2", json.RawMessage(`{"id":2}`)); err != nil {
		t.Fatalf("second save: %v, want accepted and ignored", err)
	}
	so := e.steps(t, "q1")["charge"]
	if so.RunID != "run-1" || !jsonEqual(t, so.Output, json.RawMessage(`{"id":1}`)) || !so.At.Equal(Epoch) {
		t.Fatalf("checkpoint %+v, want run-1's", so)
	}
}

// testStepsDurable: a checkpoint is on disk when SaveStep returns, both
// for a clean restart and for a new process while the old one is gone.
func testStepsDurable(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	if err := e.State.SaveStep("q1", 0, "charge", "run-1", json.RawMessage(`{"id":1}`)); err != nil {
		t.Fatal(err)
	}
	if so, ok := e.again(t).steps(t, "q1")["charge"]; !ok || so.RunID != "run-1" {
		t.Fatalf("seen by another handle: %+v, %v", so, ok)
	}
	if so, ok := e.reopen(t).steps(t, "q1")["charge"]; !ok || !jsonEqual(t, so.Output, json.RawMessage(`{"id":1}`)) {
		t.Fatalf("after restart: %+v, %v", so, ok)
	}
}

// testRecordRun: RecordRun does not wait for the disk, so the history is
// read until it shows up; runs of an entry come oldest first.
func testRecordRun(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	first := &touba.Run{RunID: "run-1", QueueID: "q1", TriggerRef: "trigger:t", Attempt: 1, Status: "retry",
		ErrorCode: touba.EHandlerFailed, ErrorMessage: "boom", StartedAt: Epoch}
	second := &touba.Run{RunID: "run-2", QueueID: "q1", TriggerRef: "trigger:t", Attempt: 2,
		Status: touba.StatusDone, StartedAt: Epoch.Add(time.Minute)}
	other := &touba.Run{RunID: "run-3", QueueID: "q2", TriggerRef: "trigger:t", Attempt: 1,
		Status: touba.StatusDone, StartedAt: Epoch}
	e.clock.Add(2 * time.Minute)
	// Recorded out of order: the listing orders by start.
	e.State.RecordRun(second)
	e.State.RecordRun(first)
	e.State.RecordRun(other)
	var runs []touba.Run
	eventually(t, "run history of q1", func() bool {
		var err error
		if runs, err = e.State.Runs(e.ctx, "q1"); err != nil {
			t.Fatal(err)
		}
		return len(runs) == 2
	})
	for i, want := range []*touba.Run{first, second} {
		got := runs[i]
		if got.RunID != want.RunID || got.QueueID != "q1" || got.TriggerRef != want.TriggerRef ||
			got.Attempt != want.Attempt || got.Status != want.Status || got.ErrorCode != want.ErrorCode ||
			got.ErrorMessage != want.ErrorMessage || !got.StartedAt.Equal(want.StartedAt) {
			t.Fatalf("run %d: %+v, want %+v", i, got, want)
		}
		if got.EndedAt == nil || got.EndedAt.Before(got.StartedAt) {
			t.Fatalf("run %d: ended at %v, want a time after its start", i, got.EndedAt)
		}
	}
	if none, err := e.State.Runs(e.ctx, "q-none"); err != nil || len(none) != 0 {
		t.Fatalf("runs of an entry without runs: %v, %v", none, err)
	}
}
