package journal_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/journal"
)

// TestRecover plays a crash with two handles: a holds effects and is then
// treated as dead; b is the next start.
func TestRecover(t *testing.T) {
	ctx := context.Background()
	path := journalPath(t)
	a := mustOpen(t, path, journal.Options{})
	for _, id := range []string{"q:prepared", "q:dispatched", "q:applied", "q:reconcile"} {
		p := prep("q", id, "c-"+id)
		if id == "q:reconcile" {
			p.RetryMode = touba.RetryReconcile
		}
		if _, err := a.Prepare(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"q:dispatched", "q:applied", "q:reconcile"} {
		if err := a.Dispatch(ctx, "q", id, "c-"+id); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Finish(ctx, touba.EffectOutcome{Scope: "q", EffectID: "q:applied", CallID: "c-q:applied",
		State: touba.EffectApplied, ReceiptRef: "r1", Result: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	// A handle does not recover what it holds itself.
	if got, err := a.Recover(ctx); err != nil || len(got) != 0 {
		t.Fatalf("recover by the holder: %v, %v; want nothing", got, err)
	}

	b := mustOpen(t, path, journal.Options{})
	got, err := b.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].EffectID != "q:dispatched" || got[1].EffectID != "q:reconcile" ||
		got[0].State != touba.EffectUnknown || got[1].State != touba.EffectUnknown {
		t.Fatalf("recovered %+v, want q:dispatched and q:reconcile as unknown", got)
	}
	for id, want := range map[string]string{
		"q:prepared":   touba.EffectPrepared,
		"q:dispatched": touba.EffectUnknown,
		"q:applied":    touba.EffectApplied,
		"q:reconcile":  touba.EffectUnknown,
	} {
		if got := mustGet(t, b, "q", id).State; got != want {
			t.Errorf("%s: state=%s, want %s", id, got, want)
		}
	}
	ev := mustEvents(t, b, "q", "q:dispatched")
	if got, want := len(ev), 3; got != want {
		t.Fatalf("events=%d, want %d", got, want)
	}
	last := ev[len(ev)-1]
	if last.State != touba.EffectUnknown || !strings.HasPrefix(last.Detail, journal.RecoveryDetail) || last.CallID != "c-q:dispatched" {
		t.Fatalf("recovery event %+v", last)
	}
	if !strings.Contains(last.Detail, "effect.unknown") {
		t.Fatalf("detail %q, want effect.unknown for idempotency_key", last.Detail)
	}
	ev = mustEvents(t, b, "q", "q:reconcile")
	if d := ev[len(ev)-1].Detail; !strings.Contains(d, "run.needs_reconciliation") {
		t.Fatalf("detail %q, want run.needs_reconciliation for reconcile", d)
	}
	if got, want := len(mustEvents(t, b, "q", "q:prepared")), 1; got != want {
		t.Fatalf("prepared effect events=%d, want %d (untouched)", got, want)
	}
	// The prepared effect was never sent: the new process may try again.
	if e, err := b.Prepare(ctx, prep("q", "q:prepared", "c-new")); err != nil {
		t.Fatalf("prepare after recovery: %v", err)
	} else if e.Attempts != 2 {
		t.Fatalf("attempts=%d, want 2", e.Attempts)
	}
	// A second recovery finds nothing more.
	if got, err := b.Recover(ctx); err != nil || len(got) != 0 {
		t.Fatalf("second recover: %v, %v; want nothing", got, err)
	}
}

func TestResolve(t *testing.T) {
	ctx := context.Background()
	t.Run("applied default result", func(t *testing.T) {
		j := mustOpen(t, journalPath(t), journal.Options{})
		bringTo(t, j, touba.EffectUnknown, touba.RetryNone)
		r := journal.Applied("order:42", nil)
		r.Operator = "alice"
		if err := j.Resolve(ctx, "q", "q:step", r); err != nil {
			t.Fatal(err)
		}
		e := mustGet(t, j, "q", "q:step")
		if got, want := e.ReceiptRef, "order:42"; got != want {
			t.Fatalf("receipt_ref=%s, want %s", got, want)
		}
		if got, want := string(e.Result), `{"receipt_ref":"order:42"}`; got != want {
			t.Fatalf("result=%s, want %s", got, want)
		}
		ev := mustEvents(t, j, "q", "q:step")
		if d := ev[len(ev)-1].Detail; !strings.Contains(d, "operator resolve") || !strings.Contains(d, "alice") {
			t.Fatalf("audit detail %q does not name the operator action", d)
		}
	})
	t.Run("applied with result", func(t *testing.T) {
		j := mustOpen(t, journalPath(t), journal.Options{})
		bringTo(t, j, touba.EffectUnknown, touba.RetryReconcile)
		if err := j.Resolve(ctx, "q", "q:step", journal.Applied("order:7", json.RawMessage(`{"id":7}`))); err != nil {
			t.Fatal(err)
		}
		if got, want := string(mustGet(t, j, "q", "q:step").Result), `{"id":7}`; got != want {
			t.Fatalf("result=%s, want %s", got, want)
		}
	})
	t.Run("not applied releases the identity", func(t *testing.T) {
		j := mustOpen(t, journalPath(t), journal.Options{})
		bringTo(t, j, touba.EffectUnknown, touba.RetryNone)
		if err := j.Resolve(ctx, "q", "q:step", journal.NotApplied()); err != nil {
			t.Fatal(err)
		}
		e, err := j.Prepare(ctx, prep("q", "q:step", "c2"))
		if err != nil {
			t.Fatalf("new attempt after not_applied: %v", err)
		}
		if e.EffectID != "q:step" || e.Attempts != 2 || e.State != touba.EffectPrepared {
			t.Fatalf("new attempt %+v, want q:step prepared attempt 2", e)
		}
	})
	t.Run("refused", func(t *testing.T) {
		j := mustOpen(t, journalPath(t), journal.Options{})
		bringTo(t, j, touba.EffectUnknown, touba.RetryNone)
		for name, r := range map[string]touba.EffectResolution{
			"applied without receipt":    journal.Applied("", nil),
			"invalid result":             journal.Applied("r", json.RawMessage(`{`)),
			"not applied with a receipt": {State: touba.EffectNotApplied, ReceiptRef: "r"},
			"not a verdict":              {State: touba.EffectUnknown},
		} {
			if err := j.Resolve(ctx, "q", "q:step", r); err == nil {
				t.Errorf("%s: accepted", name)
			}
		}
		if err := j.Resolve(ctx, "q", "q:missing", journal.NotApplied()); err == nil {
			t.Error("missing effect: accepted")
		}
		if got, want := mustGet(t, j, "q", "q:step").State, touba.EffectUnknown; got != want {
			t.Fatalf("state=%s, want %s", got, want)
		}
	})
}

// A call whose effect was recovered by another handle learns it on its
// late Finish, and no longer blocks the identity in its process.
func TestLateFinishAfterRecovery(t *testing.T) {
	ctx := context.Background()
	path := journalPath(t)
	a := mustOpen(t, path, journal.Options{})
	if _, err := a.Prepare(ctx, prep("q", "q:step", "c1")); err != nil {
		t.Fatal(err)
	}
	if err := a.Dispatch(ctx, "q", "q:step", "c1"); err != nil {
		t.Fatal(err)
	}
	if _, err := mustOpen(t, path, journal.Options{}).Recover(ctx); err != nil {
		t.Fatal(err)
	}
	err := a.Finish(ctx, touba.EffectOutcome{Scope: "q", EffectID: "q:step", CallID: "c1", State: touba.EffectApplied})
	if got, want := errorIs(err), "ErrTransition"; got != want {
		t.Fatalf("late finish: %q (%v), want %q", got, err, want)
	}
	e, err := a.Prepare(ctx, prep("q", "q:step", "c2"))
	if err != nil {
		t.Fatalf("prepare after the late finish: %v", err)
	}
	if got, want := e.Attempts, 2; got != want {
		t.Fatalf("attempts=%d, want %d", got, want)
	}
}
