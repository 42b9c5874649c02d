package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/sqlite/journal"
)

// bringTo walks a new effect to state through the API, with call "c1".
func bringTo(tb testing.TB, j *journal.Journal, state, retryMode string) {
	tb.Helper()
	ctx := context.Background()
	if state == "" {
		return
	}
	p := prep("q", "q:step", "c1")
	p.RetryMode = retryMode
	if _, err := j.Prepare(ctx, p); err != nil {
		tb.Fatalf("prepare: %v", err)
	}
	if state == touba.EffectPrepared {
		return
	}
	if state != touba.EffectNotApplied {
		if err := j.Dispatch(ctx, "q", "q:step", "c1"); err != nil {
			tb.Fatalf("dispatch: %v", err)
		}
		if state == touba.EffectDispatched {
			return
		}
	}
	o := touba.EffectOutcome{Scope: "q", EffectID: "q:step", CallID: "c1", State: state}
	if state == touba.EffectApplied {
		o.ReceiptRef, o.Result = "order:42", json.RawMessage(`{"id":42}`)
	}
	if err := j.Finish(ctx, o); err != nil {
		tb.Fatalf("finish %s: %v", state, err)
	}
}

func TestTransitions(t *testing.T) {
	ctx := context.Background()
	finish := func(state string) func(*journal.Journal) error {
		return func(j *journal.Journal) error {
			return j.Finish(ctx, touba.EffectOutcome{Scope: "q", EffectID: "q:step", CallID: "c1", State: state})
		}
	}
	prepare := func(call string) func(*journal.Journal) error {
		return func(j *journal.Journal) error { _, err := j.Prepare(ctx, prep("q", "q:step", call)); return err }
	}
	dispatch := func(call string) func(*journal.Journal) error {
		return func(j *journal.Journal) error { return j.Dispatch(ctx, "q", "q:step", call) }
	}
	resolve := func(r touba.EffectResolution) func(*journal.Journal) error {
		return func(j *journal.Journal) error { return j.Resolve(ctx, "q", "q:step", r) }
	}
	conflicting := func(j *journal.Journal) error {
		p := prep("q", "q:step", "c2")
		p.Fingerprint = "sha256:other"
		_, err := j.Prepare(ctx, p)
		return err
	}
	idem, reconcile, none := touba.RetryIdempotencyKey, touba.RetryReconcile, touba.RetryNone
	tests := []struct {
		name      string
		from      string
		retryMode string
		do        func(*journal.Journal) error
		wantErr   string // errorIs of the error
		wantState string
	}{
		{"new/prepare", "", idem, prepare("c1"), "", touba.EffectPrepared},
		{"prepared/dispatch", touba.EffectPrepared, idem, dispatch("c1"), "", touba.EffectDispatched},
		{"prepared/dispatch by another call", touba.EffectPrepared, idem, dispatch("c2"), touba.EEffectInProgress, touba.EffectPrepared},
		{"prepared/prepare by another call", touba.EffectPrepared, idem, prepare("c2"), touba.EEffectInProgress, touba.EffectPrepared},
		{"prepared/finish not_applied", touba.EffectPrepared, idem, finish(touba.EffectNotApplied), "", touba.EffectNotApplied},
		{"prepared/resolve", touba.EffectPrepared, idem, resolve(journal.NotApplied()), touba.EEffectNotUnknown, touba.EffectPrepared},
		{"dispatched/finish applied", touba.EffectDispatched, idem, finish(touba.EffectApplied), "", touba.EffectApplied},
		{"dispatched/finish not_applied", touba.EffectDispatched, idem, finish(touba.EffectNotApplied), "", touba.EffectNotApplied},
		{"dispatched/finish unknown", touba.EffectDispatched, idem, finish(touba.EffectUnknown), "", touba.EffectUnknown},
		{"dispatched/dispatch again", touba.EffectDispatched, idem, dispatch("c1"), "ErrTransition", touba.EffectDispatched},
		{"dispatched/prepare", touba.EffectDispatched, idem, prepare("c2"), touba.EEffectInProgress, touba.EffectDispatched},
		{"dispatched/resolve", touba.EffectDispatched, idem, resolve(journal.Applied("r", nil)), touba.EEffectNotUnknown, touba.EffectDispatched},
		{"applied/prepare", touba.EffectApplied, idem, prepare("c2"), "ErrApplied", touba.EffectApplied},
		{"applied/prepare other fingerprint", touba.EffectApplied, idem, conflicting, touba.EEffectRequestConflict, touba.EffectApplied},
		{"applied/dispatch", touba.EffectApplied, idem, dispatch("c1"), "ErrTransition", touba.EffectApplied},
		{"applied/finish not_applied", touba.EffectApplied, idem, finish(touba.EffectNotApplied), "ErrTransition", touba.EffectApplied},
		{"applied/finish unknown", touba.EffectApplied, idem, finish(touba.EffectUnknown), "ErrTransition", touba.EffectApplied},
		{"applied/finish applied", touba.EffectApplied, idem, finish(touba.EffectApplied), "ErrTransition", touba.EffectApplied},
		{"applied/resolve not_applied", touba.EffectApplied, idem, resolve(journal.NotApplied()), touba.EEffectNotUnknown, touba.EffectApplied},
		{"applied/resolve applied", touba.EffectApplied, idem, resolve(journal.Applied("r2", nil)), touba.EEffectNotUnknown, touba.EffectApplied},
		{"not_applied/prepare", touba.EffectNotApplied, none, prepare("c2"), "", touba.EffectPrepared},
		{"not_applied/prepare other fingerprint", touba.EffectNotApplied, idem, conflicting, touba.EEffectRequestConflict, touba.EffectNotApplied},
		{"not_applied/finish applied", touba.EffectNotApplied, idem, finish(touba.EffectApplied), "ErrTransition", touba.EffectNotApplied},
		{"not_applied/resolve", touba.EffectNotApplied, idem, resolve(journal.Applied("r", nil)), touba.EEffectNotUnknown, touba.EffectNotApplied},
		{"unknown idempotency_key/prepare", touba.EffectUnknown, idem, prepare("c2"), "", touba.EffectPrepared},
		{"unknown reconcile/prepare", touba.EffectUnknown, reconcile, prepare("c2"), touba.EEffectReconciliationRequired, touba.EffectUnknown},
		{"unknown none/prepare", touba.EffectUnknown, none, prepare("c2"), touba.EEffectOutcomeUnknown, touba.EffectUnknown},
		{"unknown/dispatch", touba.EffectUnknown, idem, dispatch("c1"), "ErrTransition", touba.EffectUnknown},
		{"unknown/finish applied", touba.EffectUnknown, idem, finish(touba.EffectApplied), "ErrTransition", touba.EffectUnknown},
		{"unknown/resolve applied", touba.EffectUnknown, none, resolve(journal.Applied("r", nil)), "", touba.EffectApplied},
		{"unknown/resolve not_applied", touba.EffectUnknown, reconcile, resolve(journal.NotApplied()), "", touba.EffectNotApplied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := mustOpen(t, journalPath(t), journal.Options{})
			bringTo(t, j, tt.from, tt.retryMode)
			before := mustEvents(t, j, "q", "q:step")
			err := tt.do(j)
			if got, want := errorIs(err), tt.wantErr; got != want {
				t.Fatalf("error %q (%v), want %q", got, err, want)
			}
			if got, want := mustGet(t, j, "q", "q:step").State, tt.wantState; got != want {
				t.Fatalf("state=%s, want %s", got, want)
			}
			after := mustEvents(t, j, "q", "q:step")
			wantEvents := len(before)
			if tt.wantErr == "" {
				wantEvents++
			}
			if got, want := len(after), wantEvents; got != want {
				t.Fatalf("events=%d, want %d", got, want)
			}
			if tt.wantErr == "" {
				if got, want := after[len(after)-1].State, tt.wantState; got != want {
					t.Fatalf("last event state=%s, want %s", got, want)
				}
			}
		})
	}
}

func TestPrepareNewAttemptCountsAndClears(t *testing.T) {
	ctx := context.Background()
	j := mustOpen(t, journalPath(t), journal.Options{})
	bringTo(t, j, touba.EffectUnknown, touba.RetryIdempotencyKey)
	e, err := j.Prepare(ctx, prep("q", "q:step", "c2"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := e.Attempts, 2; got != want {
		t.Fatalf("attempts=%d, want %d", got, want)
	}
	if got, want := e.CallID, "c2"; got != want {
		t.Fatalf("call_id=%s, want %s", got, want)
	}
	// The old holder has lost the effect: its late answer is refused.
	err = j.Finish(ctx, touba.EffectOutcome{Scope: "q", EffectID: "q:step", CallID: "c1", State: touba.EffectApplied})
	if got, want := touba.ErrorCode(err), touba.EEffectInProgress; got != want {
		t.Fatalf("late finish code=%s (%v), want %s", got, err, want)
	}
}

func TestPrepareRefusedReturnsStoredEffect(t *testing.T) {
	ctx := context.Background()
	j := mustOpen(t, journalPath(t), journal.Options{})
	bringTo(t, j, touba.EffectApplied, touba.RetryNone)
	e, err := j.Prepare(ctx, prep("q", "q:step", "c2"))
	var refused *touba.RefusedError
	if !errorsAs(err, &refused) || e == nil {
		t.Fatalf("prepare of applied: %v, %v; want a RefusedError and the stored effect", e, err)
	}
	if got, want := string(e.Result), `{"id":42}`; got != want {
		t.Fatalf("stored result=%s, want %s", got, want)
	}
	if got, want := e.ReceiptRef, "order:42"; got != want {
		t.Fatalf("receipt_ref=%s, want %s", got, want)
	}
}

// The file itself refuses to rewrite an applied effect or an audit row.
func TestFileRefusesRewrites(t *testing.T) {
	path := journalPath(t)
	j := mustOpen(t, path, journal.Options{})
	bringTo(t, j, touba.EffectApplied, touba.RetryNone)
	db, err := sqlitex.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, q := range []string{
		`UPDATE effects SET state = 'not_applied'`,
		`UPDATE effect_events SET detail = 'x'`,
		`DELETE FROM effect_events`,
	} {
		if _, err := db.Write.Exec(q); err == nil {
			t.Errorf("%s: accepted, want refused", q)
		}
	}
}

func TestCompensation(t *testing.T) {
	ctx := context.Background()
	j := mustOpen(t, journalPath(t), journal.Options{})
	comp := prep("q", touba.CompensationID("q:step"), "k1")
	comp.Operation = touba.OperationCompensate
	if _, err := j.Prepare(ctx, comp); !errors.Is(err, touba.ErrNotCompensable) {
		t.Fatalf("compensation of a missing effect: %v, want ErrNotCompensable", err)
	}
	bringTo(t, j, touba.EffectApplied, touba.RetryIdempotencyKey)
	bad := prep("q", touba.CompensationID("q:step"), "k1")
	if _, err := j.Prepare(ctx, bad); err == nil {
		t.Fatal("operation invoke on a :compensate id accepted")
	}
	e, err := j.Prepare(ctx, comp)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := e.EffectID, "q:step:compensate"; got != want {
		t.Fatalf("effect_id=%s, want %s", got, want)
	}
	if got, want := e.Operation, touba.OperationCompensate; got != want {
		t.Fatalf("operation=%s, want %s", got, want)
	}
	if got, want := mustGet(t, j, "q", "q:step").State, touba.EffectApplied; got != want {
		t.Fatalf("original state=%s, want %s", got, want)
	}
	if orig, ok := touba.IsCompensation(e.EffectID); !ok || orig != "q:step" {
		t.Fatalf("IsCompensation=%q,%v, want q:step,true", orig, ok)
	}
}

func TestListAndFilter(t *testing.T) {
	ctx := context.Background()
	j := mustOpen(t, journalPath(t), journal.Options{})
	for _, s := range []string{"a", "b", "c"} {
		if _, err := j.Prepare(ctx, prep("q1", "q1:"+s, "call-"+s)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := j.Prepare(ctx, prep("q2", "q2:a", "call-q2")); err != nil {
		t.Fatal(err)
	}
	if err := j.Finish(ctx, touba.EffectOutcome{Scope: "q1", EffectID: "q1:b", CallID: "call-b", State: touba.EffectNotApplied}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		f    touba.EffectFilter
		want int
	}{
		{touba.EffectFilter{}, 4},
		{touba.EffectFilter{Scope: "q1"}, 3},
		{touba.EffectFilter{State: touba.EffectPrepared}, 3},
		{touba.EffectFilter{State: touba.EffectNotApplied, Scope: "q1"}, 1},
		{touba.EffectFilter{Scope: "q1", Limit: 2}, 2},
		{touba.EffectFilter{Scope: "nope"}, 0},
	} {
		got, err := j.List(ctx, tt.f)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != tt.want {
			t.Errorf("List(%+v)=%d effects, want %d", tt.f, len(got), tt.want)
		}
	}
}
