package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// eventRows counts the effect_events rows of scope's effect "s".
func eventRows(t *testing.T, st *Store, scope string) int {
	t.Helper()
	var n int
	if err := st.db.pool.QueryRow(context.Background(), `SELECT count(*) FROM touba.effect_events WHERE scope = $1 AND effect_id = $2`,
		scope, scope+":s").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOutcomeKeptInTheRow: an effect whose call answered at once, through
// the batch statements of many runs at once, is its row alone (no
// effect_events row), and Events lists prepared, dispatched and applied
// as before, the outcome with a seq of its own and its time.
func TestOutcomeKeptInTheRow(t *testing.T) {
	const n = 16
	ctx := context.Background()
	st, _ := deferStore(t)
	ds := leaseAll(t, st, n)
	errs := atOnce(n, func(i int) error {
		if _, err := st.Journal.PrepareDispatched(ctx, pdOf(ds[i], "c")); err != nil {
			return err
		}
		return st.Journal.Finish(ctx, applied(ds[i], "c", i))
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	for i, d := range ds {
		if rows := eventRows(t, st, d.QueueID); rows != 0 {
			t.Errorf("effect %d: %d effect_events rows, want 0 (the outcome in the row)", i, rows)
		}
		e, err := st.Journal.Get(ctx, d.QueueID, d.QueueID+":s")
		if err != nil || e == nil {
			t.Fatalf("effect %d: %v, %v", i, e, err)
		}
		evs, err := st.Journal.Events(ctx, d.QueueID, d.QueueID+":s")
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 3 || evs[0].State != touba.EffectPrepared || evs[1].State != touba.EffectDispatched {
			t.Fatalf("effect %d events %+v, want prepared, dispatched, applied", i, evs)
		}
		out := evs[2]
		if out.State != touba.EffectApplied || out.CallID != "c" || out.Seq <= 0 || !out.At.Equal(e.UpdatedAt) ||
			out.Scope != d.QueueID || out.EffectID != d.QueueID+":s" || !strings.Contains(out.Detail, fmt.Sprintf("receipt_ref=R-%d", i)) {
			t.Errorf("effect %d outcome event %+v, want applied by c, seq > 0, at %v, its receipt in the detail", i, out, e.UpdatedAt)
		}
	}
}

// TestLaterOutcomesAreRows: the first outcome (unknown) is kept in the
// row; the next attempt's events and its outcome are rows, and Events
// lists all of them in the order they were written, the row's outcome
// between the first attempt's dispatch and the second's prepare. Its
// columns are never rewritten.
func TestLaterOutcomesAreRows(t *testing.T) {
	ctx := context.Background()
	st, _ := deferStore(t)
	d := leaseAll(t, st, 1)[0]
	p := pdOf(d, "c1")
	p.RetryMode = touba.RetryIdempotencyKey
	if _, err := st.Journal.Prepare(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := st.Journal.Dispatch(ctx, d.QueueID, d.QueueID+":s", "c1"); err != nil {
		t.Fatal(err)
	}
	// The single-row statement (fusedFinish) itself: the writer's batches
	// take the multi-row one (finishMany, above) unless a batch runs again.
	unknown := touba.EffectOutcome{Scope: d.QueueID, EffectID: d.QueueID + ":s", CallID: "c1", State: touba.EffectUnknown}
	err := st.Journal.submit(d.QueueID, func(ctx context.Context, tx *Tx) error {
		fenced, finished, err := st.Journal.finishFused(ctx, tx, unknown, d.LeaseToken, st.db.now(), "outcome unknown")
		if err == nil && (!fenced || !finished) {
			err = fmt.Errorf("fused finish: fenced %v, finished %v", fenced, finished)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	st.Journal.release(d.QueueID, d.QueueID+":s", "c1")
	if rows := eventRows(t, st, d.QueueID); rows != 1 {
		t.Fatalf("%d effect_events rows after prepare, dispatch and unknown, want 1 (dispatched)", rows)
	}
	p.CallID = "c2"
	if e, err := st.Journal.Prepare(ctx, p); err != nil || e.Attempts != 2 {
		t.Fatalf("second attempt: %+v, %v", e, err)
	}
	if err := st.Journal.Dispatch(ctx, d.QueueID, d.QueueID+":s", "c2"); err != nil {
		t.Fatal(err)
	}
	if err := st.Journal.Finish(ctx, applied(d, "c2", 7)); err != nil {
		t.Fatal(err)
	}
	if rows := eventRows(t, st, d.QueueID); rows != 4 {
		t.Fatalf("%d effect_events rows, want 4 (the later events)", rows)
	}
	evs, err := st.Journal.Events(ctx, d.QueueID, d.QueueID+":s")
	if err != nil {
		t.Fatal(err)
	}
	if evs[2].Detail != "outcome unknown" {
		t.Errorf("the kept outcome's detail %q, want %q", evs[2].Detail, "outcome unknown")
	}
	want := []struct{ state, call string }{{touba.EffectPrepared, "c1"}, {touba.EffectDispatched, "c1"}, {touba.EffectUnknown, "c1"},
		{touba.EffectPrepared, "c2"}, {touba.EffectDispatched, "c2"}, {touba.EffectApplied, "c2"}}
	if len(evs) != len(want) {
		t.Fatalf("%d events %+v, want %d", len(evs), evs, len(want))
	}
	for i, w := range want {
		if evs[i].State != w.state || evs[i].CallID != w.call || (i > 1 && evs[i].Seq <= evs[i-1].Seq) || (i > 0 && evs[i].At.Before(evs[i-1].At)) {
			t.Fatalf("event %d: %+v, want %s by %s after %+v", i, evs[i], w.state, w.call, evs[i-1])
		}
	}
	_, err = st.db.pool.Exec(ctx, `UPDATE touba.effects SET settled = 'applied' WHERE scope = $1`, d.QueueID)
	if err == nil || !strings.Contains(err.Error(), "never rewritten") {
		t.Fatalf("rewriting the kept outcome: %v, want refused", err)
	}
}
