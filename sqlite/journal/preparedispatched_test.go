package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/journal"
)

// PrepareDispatched (in-process handlers) writes prepared and dispatched
// in one transition: the row is dispatched, the audit trail holds both
// events in order, and it is one operation of the writer. What follows
// (outcome, recovery, a second prepare) is as after Prepare + Dispatch.
func TestPrepareDispatched(t *testing.T) {
	ctx := context.Background()
	path := journalPath(t)
	j := mustOpen(t, path, journal.Options{})
	before := j.Stats().Transitions
	e, err := j.PrepareDispatched(ctx, prep("q", "q:step", "c1"))
	if err != nil {
		t.Fatal(err)
	}
	if e.State != touba.EffectDispatched || e.Attempts != 1 {
		t.Fatalf("returned %s attempt %d, want dispatched attempt 1", e.State, e.Attempts)
	}
	if got := mustGet(t, j, "q", "q:step"); got.State != touba.EffectDispatched || got.CallID != "c1" {
		t.Fatalf("stored %s by %s, want dispatched by c1", got.State, got.CallID)
	}
	if n := j.Stats().Transitions - before; n != 1 {
		t.Errorf("%d writer operations, want 1", n)
	}
	var states []string
	for _, ev := range mustEvents(t, j, "q", "q:step") {
		states = append(states, ev.State)
	}
	if len(states) != 2 || states[0] != touba.EffectPrepared || states[1] != touba.EffectDispatched {
		t.Fatalf("events %v, want [prepared dispatched]", states)
	}
	// Another call of the identity is refused while c1 holds it.
	if _, err := j.PrepareDispatched(ctx, prep("q", "q:step", "c2")); touba.ErrorCode(err) != touba.EEffectInProgress {
		t.Fatalf("second prepare: %v, want EffectInProgress", err)
	}
	if err := j.Finish(ctx, touba.EffectOutcome{Scope: "q", EffectID: "q:step", CallID: "c1", State: touba.EffectApplied,
		ReceiptRef: "R", Result: json.RawMessage(`{"ok":1}`)}); err != nil {
		t.Fatal(err)
	}
	_, err = j.PrepareDispatched(ctx, prep("q", "q:step", "c3"))
	if !errors.Is(err, journal.ErrApplied) {
		t.Fatalf("prepare of an applied effect: %v, want ErrApplied", err)
	}
	if got := mustGet(t, j, "q", "q:step"); got.State != touba.EffectApplied {
		t.Fatalf("applied effect rewritten to %s", got.State)
	}
	// A row that allows a new attempt (not_applied) is prepared again and
	// dispatched in the same operation: attempt 2, both events appended.
	if _, err := j.Prepare(ctx, prep("q", "q:two", "c1")); err != nil {
		t.Fatal(err)
	}
	if err := j.Finish(ctx, touba.EffectOutcome{Scope: "q", EffectID: "q:two", CallID: "c1", State: touba.EffectNotApplied}); err != nil {
		t.Fatal(err)
	}
	if e, err = j.PrepareDispatched(ctx, prep("q", "q:two", "c2")); err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, j, "q", "q:two")
	if e.State != touba.EffectDispatched || got.State != touba.EffectDispatched || got.Attempts != 2 || got.CallID != "c2" {
		t.Fatalf("again: returned %s, stored %s attempt %d by %s; want dispatched attempt 2 by c2", e.State, got.State, got.Attempts, got.CallID)
	}
	ev := mustEvents(t, j, "q", "q:two")
	if n := len(ev); n != 4 || ev[2].State != touba.EffectPrepared || ev[3].State != touba.EffectDispatched {
		t.Fatalf("again: %d events, want 4 (prepared, not_applied, prepared, dispatched)", n)
	}
}
