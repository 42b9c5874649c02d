package state_test

import (
	"context"
	"path/filepath"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/state"
)

func TestOperatorEvents(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s, err := state.Open(ctx, path, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []touba.OperatorEvent{
		{Action: "queue.replay", QueueID: "q1", Target: "q1", Outcome: "done", Operator: "uid 0", Detail: "failed -> pending"},
		{Action: "deliveries.replay", QueueID: "q2", Target: "d1", Outcome: "done", Operator: "uid 0", Detail: "enqueued"},
		{Action: "queue.replay", QueueID: "q1", Target: "q1", Outcome: "refused", Operator: "uid 0", Detail: "entry is done"},
	} {
		if err := s.RecordOperator(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	// The trail is durable: read it back from a reopened file.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = state.Open(ctx, path, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	of1, err := s.OperatorEvents(ctx, "q1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(of1), 2; got != want {
		t.Fatalf("events of q1=%d, want %d", got, want)
	}
	if of1[0].Outcome != "done" || of1[1].Outcome != "refused" || of1[0].At.IsZero() {
		t.Fatalf("events of q1 out of order or incomplete: %+v", of1)
	}
	last, err := s.OperatorEvents(ctx, "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(last) != 2 || last[0].Action != "deliveries.replay" || last[1].Detail != "entry is done" {
		t.Fatalf("latest two: %+v", last)
	}
}
