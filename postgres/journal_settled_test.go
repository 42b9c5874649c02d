package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// An effect's first outcome is a column of its row only while the effect
// has no effect_events row (0022_pgspeed_rows.sql): after a
// prepare-and-dispatch it writes no row, after a prepare and a dispatch
// (a row) it is a row, after the row outcome every event is a row; the
// audit trail keeps its order either way, and the row's outcome is never
// rewritten.
func TestFirstOutcomeInTheRow(t *testing.T) {
	url := pgtest.New(t)
	ctx := context.Background()
	st, err := Open(ctx, Config{URL: url, NodeID: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, ev := range []string{"e-1", "e-2", "e-3"} {
		if _, err := st.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: ev, Digest: "d", Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	leased, err := st.Queue.Lease(ctx, 3)
	if err != nil || len(leased) != 3 {
		t.Fatalf("lease: %v, %v", leased, err)
	}
	prep := func(i int) touba.EffectPrepare {
		d := leased[i]
		return touba.EffectPrepare{Scope: d.QueueID, EffectID: d.QueueID + ":s", ToolRef: "tool:t/T", Operation: touba.OperationInvoke,
			Fingerprint: "sha256:00ff", RetryMode: touba.RetryIdempotencyKey, CallID: "c1", LeaseToken: d.LeaseToken}
	}
	trail := func(i int) (string, int) {
		t.Helper()
		p := prep(i)
		evs, err := st.Journal.Events(ctx, p.Scope, p.EffectID)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range evs {
			out = append(out, fmt.Sprintf("%s/%s/%s", e.State, e.CallID, e.Detail))
		}
		var rows int
		if err := st.db.pool.QueryRow(ctx, `SELECT COUNT(*) FROM touba.effect_events WHERE scope = $1 AND effect_id = $2`,
			p.Scope, p.EffectID).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		return strings.Join(out, " "), rows
	}
	finish := func(i int, state string) {
		t.Helper()
		p := prep(i)
		if err := st.Journal.Finish(ctx, touba.EffectOutcome{Scope: p.Scope, EffectID: p.EffectID, CallID: "c1", State: state, ReceiptRef: "R"}); err != nil {
			t.Fatal(err)
		}
	}

	// Prepare-and-dispatch, then the outcome: no row at all.
	if _, err := st.Journal.PrepareDispatched(ctx, prep(0)); err != nil {
		t.Fatal(err)
	}
	finish(0, touba.EffectApplied)
	want := "prepared/c1/prepare attempt 1 dispatched/c1/dispatch attempt 1 applied/c1/outcome applied receipt_ref=R"
	if got, rows := trail(0); got != want || rows != 0 {
		t.Errorf("prepare-and-dispatch: events %q in %d rows, want %q in 0", got, rows, want)
	}

	// Prepare, dispatch (a row), outcome: the outcome is a row after it.
	if _, err := st.Journal.Prepare(ctx, prep(1)); err != nil {
		t.Fatal(err)
	}
	if err := st.Journal.Dispatch(ctx, prep(1).Scope, prep(1).EffectID, "c1"); err != nil {
		t.Fatal(err)
	}
	finish(1, touba.EffectApplied)
	want = "prepared/c1/prepare attempt 1 dispatched/c1/dispatch attempt 1 applied/c1/outcome applied receipt_ref=R"
	if got, rows := trail(1); got != want || rows != 2 {
		t.Errorf("prepare, dispatch: events %q in %d rows, want %q in 2", got, rows, want)
	}

	// An unknown outcome in the row, resolved later: the verdict is a row.
	if _, err := st.Journal.PrepareDispatched(ctx, prep(2)); err != nil {
		t.Fatal(err)
	}
	finish(2, touba.EffectUnknown)
	p := prep(2)
	if _, err := st.db.pool.Exec(ctx, `UPDATE touba.effects SET settled_detail = 'rewritten' WHERE scope = $1`, p.Scope); err == nil ||
		!strings.Contains(err.Error(), "first outcome is never rewritten") {
		t.Errorf("rewriting the row's outcome: %v, want refused", err)
	}
	if err := st.Journal.Resolve(ctx, p.Scope, p.EffectID, touba.EffectResolution{State: touba.EffectApplied, ReceiptRef: "R2", Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	got, rows := trail(2)
	if !strings.HasPrefix(got, "prepared/c1/prepare attempt 1 dispatched/c1/dispatch attempt 1 unknown/c1/outcome unknown receipt_ref=R applied/") || rows != 1 {
		t.Errorf("unknown, then resolved: events %q in %d rows, want prepared, dispatched, unknown (the row's), then applied in 1 row", got, rows)
	}
}
