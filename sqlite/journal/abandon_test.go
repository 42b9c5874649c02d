package journal_test

import (
	"context"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/journal"
)

// dispatchedFor prepares and dispatches (scope, effectID) for callID with
// the given retry mode.
func dispatchedFor(t *testing.T, j *journal.Journal, scope, effectID, callID, mode string) {
	t.Helper()
	p := prep(scope, effectID, callID)
	p.RetryMode = mode
	ctx := context.Background()
	if _, err := j.Prepare(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := j.Dispatch(ctx, scope, effectID, callID); err != nil {
		t.Fatal(err)
	}
}

// Abandon (the outcome could not be committed) releases the claim and
// records the effect unknown at once.
func TestAbandonRecordsUnknown(t *testing.T) {
	j := mustOpen(t, journalPath(t), journal.Options{})
	ctx := context.Background()
	dispatchedFor(t, j, "q1", "q1:s", "c1", touba.RetryNone)
	if err := j.Abandon(ctx, "q1", "q1:s", "c1"); err != nil {
		t.Fatal(err)
	}
	if e := mustGet(t, j, "q1", "q1:s"); e.State != touba.EffectUnknown {
		t.Fatalf("state %s, want unknown", e.State)
	}
	ev := mustEvents(t, j, "q1", "q1:s")
	if last := ev[len(ev)-1]; last.Detail != journal.OrphanDetail {
		t.Fatalf("last event %+v, want the orphan detail", last)
	}
	p := prep("q1", "q1:s", "c2")
	p.RetryMode = touba.RetryNone
	if _, err := j.Prepare(ctx, p); touba.ErrorCode(err) != touba.EEffectOutcomeUnknown {
		t.Fatalf("prepare after abandon: %v, want EffectOutcomeUnknown", err)
	}
}

// When even Abandon's write fails, the row stays dispatched with no call
// holding it: the next Prepare treats it as unknown (no EffectInProgress),
// Orphaned says so for the operator views, and Resolve accepts it.
func TestOrphanedDispatchedIsUnknown(t *testing.T) {
	j := mustOpen(t, journalPath(t), journal.Options{})
	ctx := context.Background()

	dispatchedFor(t, j, "q1", "q1:s", "c1", touba.RetryReconcile)
	if j.Orphaned(ctx, "q1", "q1:s") {
		t.Fatal("a dispatched effect whose call is running reads orphaned")
	}
	j.DropClaim("q1", "q1:s", "c1")
	if !j.Orphaned(ctx, "q1", "q1:s") {
		t.Fatal("a dispatched effect no call holds does not read orphaned")
	}
	p := prep("q1", "q1:s", "c2")
	p.RetryMode = touba.RetryReconcile
	_, err := j.Prepare(ctx, p)
	if code := touba.ErrorCode(err); code != touba.EEffectReconciliationRequired {
		t.Fatalf("prepare of an orphaned dispatched effect: %v (code %q), want EffectReconciliationRequired", err, code)
	}
	if e := mustGet(t, j, "q1", "q1:s"); e.State != touba.EffectUnknown {
		t.Fatalf("state %s after the refused prepare, want unknown", e.State)
	}

	dispatchedFor(t, j, "q2", "q2:s", "c3", touba.RetryNone)
	j.DropClaim("q2", "q2:s", "c3")
	if err := j.Resolve(ctx, "q2", "q2:s", journal.Applied("r-1", nil)); err != nil {
		t.Fatalf("resolve of an orphaned dispatched effect: %v", err)
	}
	ev := mustEvents(t, j, "q2", "q2:s")
	var states []string
	for _, e := range ev {
		states = append(states, e.State)
	}
	if got := strings.Join(states, ","); got != "prepared,dispatched,unknown,applied" {
		t.Fatalf("events %s", got)
	}

	// A dispatched effect whose call still runs is not resolvable.
	dispatchedFor(t, j, "q3", "q3:s", "c4", touba.RetryNone)
	if err := j.Resolve(ctx, "q3", "q3:s", journal.NotApplied()); touba.ErrorCode(err) != touba.EEffectNotUnknown {
		t.Fatalf("resolve of an in-flight effect: %v, want EffectNotUnknown", err)
	}
}
