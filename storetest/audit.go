package storetest

import (
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// The operators' audit trail: durable when RecordOperator returns, read
// oldest first, per entry or the latest rows.
func runAudit(t *testing.T, f Factory) {
	t.Run("RecordAndRead", func(t *testing.T) { testAudit(t, f) })
}

func testAudit(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	events := []touba.OperatorEvent{
		{Action: "queue.replay", QueueID: "q1", Target: "q1", Outcome: "done", Operator: "uid 0", Detail: "failed -> pending"},
		{Action: "deliveries.replay", QueueID: "q2", Target: "d1", Outcome: "done", Operator: "uid 0", Detail: "enqueued"},
		{Action: "effects.resolve", Target: "q3/q3:step", Outcome: "done", Operator: "uid 1000", Detail: "applied"},
		{Action: "queue.replay", QueueID: "q1", Target: "q1", Outcome: "refused", Operator: "uid 0", Detail: "entry is done"},
	}
	for i, ev := range events {
		if i == 2 {
			ev.At = Epoch.Add(-time.Hour) // a given time is kept
		}
		if err := e.State.RecordOperator(e.ctx, ev); err != nil {
			t.Fatal(err)
		}
		e.clock.Add(time.Second)
	}
	e = e.reopen(t)
	of1, err := e.State.OperatorEvents(e.ctx, "q1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(of1) != 2 || of1[0].Outcome != "done" || of1[1].Outcome != "refused" || of1[0].Seq >= of1[1].Seq {
		t.Fatalf("events of q1: %+v, want its two, oldest first", of1)
	}
	if got, want := of1[0], events[0]; got.Action != want.Action || got.Target != want.Target || got.Operator != want.Operator ||
		got.Detail != want.Detail || !got.At.Equal(Epoch) {
		t.Fatalf("event %+v, want %+v at %v", got, want, Epoch)
	}
	all, err := e.State.OperatorEvents(e.ctx, "", 0)
	if err != nil || len(all) != 4 {
		t.Fatalf("all events: %d, %v; want 4", len(all), err)
	}
	if !all[2].At.Equal(Epoch.Add(-time.Hour)) || all[2].QueueID != "" {
		t.Fatalf("event with its own time: %+v", all[2])
	}
	last, err := e.State.OperatorEvents(e.ctx, "", 2)
	if err != nil || len(last) != 2 || last[0].Action != "effects.resolve" || last[1].Detail != "entry is done" {
		t.Fatalf("latest two: %+v, %v; want the last two recorded, oldest first", last, err)
	}
}
