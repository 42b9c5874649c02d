package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// PrepareDispatched (in-process handlers) writes prepared and dispatched
// in one operation under the entry's live lease: the row is dispatched,
// the audit trail holds both events in order, and what follows (outcome,
// a second prepare, a lost lease) is as after Prepare + Dispatch.
func TestPrepareDispatched(t *testing.T) {
	url := pgtest.New(t)
	ctx := context.Background()
	st, err := Open(ctx, Config{URL: url, NodeID: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var ids []string
	var tokens []int64
	for _, ev := range []string{"e-1", "e-2", "e-3"} {
		if _, err := st.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: ev, Digest: "d", Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	leased, err := st.Queue.Lease(ctx, 3)
	if err != nil || len(leased) != 3 {
		t.Fatalf("lease: %v, %v", leased, err)
	}
	for _, d := range leased {
		ids, tokens = append(ids, d.QueueID), append(tokens, d.LeaseToken)
	}
	prep := func(i int, step, call string) touba.EffectPrepare {
		return touba.EffectPrepare{Scope: ids[i], EffectID: ids[i] + ":" + step, ToolRef: "tool:t/T", Operation: touba.OperationInvoke,
			Fingerprint: "sha256:00ff", RetryMode: touba.RetryIdempotencyKey, CallID: call, LeaseToken: tokens[i]}
	}
	states := func(scope, effectID string) []string {
		t.Helper()
		evs, err := st.Journal.Events(ctx, scope, effectID)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range evs {
			out = append(out, e.State)
		}
		return out
	}
	before := st.Journal.JournalStats().Transitions
	e, err := st.Journal.PrepareDispatched(ctx, prep(0, "s", "c1"))
	if err != nil {
		t.Fatal(err)
	}
	if e.State != touba.EffectDispatched || e.Attempts != 1 {
		t.Fatalf("returned %s attempt %d, want dispatched attempt 1", e.State, e.Attempts)
	}
	if got, _ := st.Journal.Get(ctx, ids[0], ids[0]+":s"); got == nil || got.State != touba.EffectDispatched || got.CallID != "c1" {
		t.Fatalf("stored %+v, want dispatched by c1", got)
	}
	if n := st.Journal.JournalStats().Transitions - before; n != 1 {
		t.Errorf("%d writer operations, want 1", n)
	}
	if s := states(ids[0], ids[0]+":s"); len(s) != 2 || s[0] != touba.EffectPrepared || s[1] != touba.EffectDispatched {
		t.Fatalf("events %v, want [prepared dispatched]", s)
	}
	if _, err := st.Journal.PrepareDispatched(ctx, prep(0, "s", "c2")); touba.ErrorCode(err) != touba.EEffectInProgress {
		t.Fatalf("second prepare: %v, want EffectInProgress", err)
	}
	if err := st.Journal.Finish(ctx, touba.EffectOutcome{Scope: ids[0], EffectID: ids[0] + ":s", CallID: "c1", State: touba.EffectApplied,
		ReceiptRef: "R", Result: json.RawMessage(`{"ok":1}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Journal.PrepareDispatched(ctx, prep(0, "s", "c3")); !errors.Is(err, touba.ErrEffectApplied) {
		t.Fatalf("prepare of an applied effect: %v, want EffectApplied", err)
	}

	// not_applied allows a new attempt: prepared again and dispatched in
	// the same operation, attempt 2, both events appended.
	if _, err := st.Journal.Prepare(ctx, prep(1, "s", "c1")); err != nil {
		t.Fatal(err)
	}
	if err := st.Journal.Finish(ctx, touba.EffectOutcome{Scope: ids[1], EffectID: ids[1] + ":s", CallID: "c1", State: touba.EffectNotApplied}); err != nil {
		t.Fatal(err)
	}
	if e, err = st.Journal.PrepareDispatched(ctx, prep(1, "s", "c2")); err != nil {
		t.Fatal(err)
	}
	got, _ := st.Journal.Get(ctx, ids[1], ids[1]+":s")
	if e.State != touba.EffectDispatched || got.State != touba.EffectDispatched || got.Attempts != 2 || got.CallID != "c2" {
		t.Fatalf("again: returned %s, stored %s attempt %d by %s; want dispatched attempt 2 by c2", e.State, got.State, got.Attempts, got.CallID)
	}
	if s := states(ids[1], ids[1]+":s"); len(s) != 4 || s[2] != touba.EffectPrepared || s[3] != touba.EffectDispatched {
		t.Fatalf("again: events %v, want [prepared not_applied prepared dispatched]", s)
	}

	// A lease that ended: LeaseLost, nothing written.
	if err := st.Queue.Finish(ctx, ids[2], tokens[2], touba.StatusDone, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Journal.PrepareDispatched(ctx, prep(2, "s", "c1")); touba.ErrorCode(err) != touba.ELeaseLost {
		t.Fatalf("prepare under an ended lease: %v, want LeaseLost", err)
	}
	if got, _ := st.Journal.Get(ctx, ids[2], ids[2]+":s"); got != nil {
		t.Fatalf("an effect was written under an ended lease: %+v", got)
	}
}
