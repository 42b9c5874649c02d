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

// outcomeVia records o for the lease token in one of the two statements
// that keep an outcome in the row: the writer's batch (finishMany: every
// operation of an optimistic batch defers to it) or the single-row
// statement (fusedFinish, which the writer takes when a batch runs
// again), called here itself.
func outcomeVia(t *testing.T, st *Store, fused bool, o touba.EffectOutcome, token int64) {
	t.Helper()
	ctx := context.Background()
	if !fused {
		if err := st.Journal.Finish(ctx, o); err != nil {
			t.Fatal(err)
		}
		return
	}
	err := st.Journal.submit(o.Scope, func(ctx context.Context, tx *Tx) error {
		fenced, finished, err := st.Journal.finishFused(ctx, tx, o, token, st.db.now(), "outcome "+o.State)
		if err == nil && (!fenced || !finished) {
			err = fmt.Errorf("fused finish: fenced %v, finished %v", fenced, finished)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	st.Journal.release(o.Scope, o.EffectID, o.CallID)
}

// TestLaterOutcomesAreRows: an effect's first outcome (unknown) is kept in
// its row; the next attempt's events and its outcome are rows; Events
// lists all of them in the order they were written, the kept outcome
// between the first attempt's events and the second's. Each statement
// takes each role once (a: the single-row statement keeps, the batch
// writes the row; b: the reverse, after a first write of prepared and
// dispatched at once, so that every row follows the kept outcome). An
// effect whose first outcome is a row (c: written without a lease token,
// as by a fence that failed) keeps its next one in the row, listed last.
// The kept outcome is never rewritten.
func TestLaterOutcomesAreRows(t *testing.T) {
	ctx := context.Background()
	st, _ := deferStore(t)
	ds := leaseAll(t, st, 3)
	type want struct{ state, call string }
	check := func(name string, d *touba.Delivery, rows int, ws []want) {
		t.Helper()
		if got := eventRows(t, st, d.QueueID); got != rows {
			t.Errorf("%s: %d effect_events rows, want %d", name, got, rows)
		}
		evs, err := st.Journal.Events(ctx, d.QueueID, d.QueueID+":s")
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != len(ws) {
			t.Fatalf("%s: %d events %+v, want %d", name, len(evs), evs, len(ws))
		}
		for i, w := range ws {
			if evs[i].State != w.state || evs[i].CallID != w.call {
				t.Fatalf("%s: event %d %+v, want %s by %s", name, i, evs[i], w.state, w.call)
			}
			if i > 0 && (evs[i].At.Before(evs[i-1].At) || (evs[i-1].Seq > 0 && evs[i].Seq <= evs[i-1].Seq)) {
				t.Fatalf("%s: event %d %+v is not after %+v", name, i, evs[i], evs[i-1])
			}
		}
	}
	unknown := func(d *touba.Delivery, call string) touba.EffectOutcome {
		return touba.EffectOutcome{Scope: d.QueueID, EffectID: d.QueueID + ":s", CallID: call, State: touba.EffectUnknown}
	}
	prepare := func(p touba.EffectPrepare) {
		t.Helper()
		if _, err := st.Journal.Prepare(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := st.Journal.Dispatch(ctx, p.Scope, p.EffectID, p.CallID); err != nil {
			t.Fatal(err)
		}
	}

	a := ds[0]
	prepare(pdOf(a, "c1"))
	outcomeVia(t, st, true, unknown(a, "c1"), a.LeaseToken)
	check("a after unknown", a, 1, []want{{"prepared", "c1"}, {"dispatched", "c1"}, {"unknown", "c1"}})
	_, err := st.db.pool.Exec(ctx, `UPDATE touba.effects SET settled_detail = 'x' WHERE scope = $1`, a.QueueID)
	if err == nil || !strings.Contains(err.Error(), "kept outcome is never rewritten") {
		t.Fatalf("rewriting the kept outcome: %v, want refused", err)
	}
	prepare(pdOf(a, "c2"))
	outcomeVia(t, st, false, applied(a, "c2", 1), a.LeaseToken)
	check("a", a, 4, []want{{"prepared", "c1"}, {"dispatched", "c1"}, {"unknown", "c1"},
		{"prepared", "c2"}, {"dispatched", "c2"}, {"applied", "c2"}})

	b := ds[1]
	if _, err := st.Journal.PrepareDispatched(ctx, pdOf(b, "c1")); err != nil {
		t.Fatal(err)
	}
	outcomeVia(t, st, false, unknown(b, "c1"), b.LeaseToken)
	prepare(pdOf(b, "c2"))
	outcomeVia(t, st, true, applied(b, "c2", 2), b.LeaseToken)
	check("b", b, 3, []want{{"prepared", "c1"}, {"dispatched", "c1"}, {"unknown", "c1"},
		{"prepared", "c2"}, {"dispatched", "c2"}, {"applied", "c2"}})

	c := ds[2]
	p := pdOf(c, "c1")
	p.LeaseToken = 0 // no fence: Finish takes its own statements, which write the outcome as a row
	prepare(p)
	if err := st.Journal.Finish(ctx, unknown(c, "c1")); err != nil {
		t.Fatal(err)
	}
	prepare(pdOf(c, "c2"))
	outcomeVia(t, st, false, applied(c, "c2", 3), c.LeaseToken)
	check("c", c, 4, []want{{"prepared", "c1"}, {"dispatched", "c1"}, {"unknown", "c1"},
		{"prepared", "c2"}, {"dispatched", "c2"}, {"applied", "c2"}})
}
