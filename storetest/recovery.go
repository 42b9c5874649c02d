package storetest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Start-up recovery (SPEC §5): what a process left dispatched becomes
// unknown, never assumed applied or not, with an audit event; what it left
// prepared may be tried again.
func runRecovery(t *testing.T, f Factory) {
	t.Run("RecoverAfterCrash", func(t *testing.T) { testRecoverAfterCrash(t, f) })
	t.Run("RecoverAfterRestart", func(t *testing.T) { testRecoverAfterRestart(t, f) })
	t.Run("LateFinishAfterRecovery", func(t *testing.T) { testLateFinish(t, f) })
	t.Run("JournalDurable", func(t *testing.T) { testJournalDurable(t, f) })
}

// leaveEffects prepares and dispatches effects of scope q with call "c-<id>":
// q:prepared stays prepared, q:applied is applied, q:dispatched
// (idempotency_key) and q:reconcile (reconcile) stay dispatched.
func (e *env) leaveEffects(t *testing.T) {
	t.Helper()
	for _, id := range []string{"q:prepared", "q:dispatched", "q:applied", "q:reconcile"} {
		p := prep(id, "c-"+id)
		if id == "q:reconcile" {
			p.RetryMode = touba.RetryReconcile
		}
		if _, err := e.Journal.Prepare(e.ctx, p); err != nil {
			t.Fatal(err)
		}
		e.clock.Add(time.Second) // created in this order
	}
	for _, id := range []string{"q:dispatched", "q:applied", "q:reconcile"} {
		if err := e.Journal.Dispatch(e.ctx, "q", id, "c-"+id); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Journal.Finish(e.ctx, touba.EffectOutcome{Scope: "q", EffectID: "q:applied", CallID: "c-q:applied",
		State: touba.EffectApplied, ReceiptRef: "r1", Result: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
}

// checkRecovered checks the effects left by leaveEffects once a new
// process recovered: the dispatched ones unknown with an event naming the
// SPEC's audit event, the applied one untouched, the prepared one free for
// a new attempt. named asks that the unknown event names the SPEC's audit
// event (effect.unknown or run.needs_reconciliation).
func (e *env) checkRecovered(t *testing.T, named bool) {
	t.Helper()
	for id, want := range map[string]string{"q:prepared": touba.EffectPrepared, "q:dispatched": touba.EffectUnknown,
		"q:applied": touba.EffectApplied, "q:reconcile": touba.EffectUnknown} {
		if got := e.effect(t, "q", id).State; got != want {
			t.Fatalf("%s: state %s, want %s", id, got, want)
		}
	}
	for id, name := range map[string]string{"q:dispatched": "effect.unknown", "q:reconcile": "run.needs_reconciliation"} {
		ev := e.events(t, "q", id)
		last := ev[len(ev)-1]
		if len(ev) != 3 || last.State != touba.EffectUnknown || last.CallID != "c-"+id || last.Detail == "" {
			t.Fatalf("%s: events %+v, want prepared, dispatched, then unknown by its call, with a detail", id, ev)
		}
		if named && !strings.Contains(last.Detail, name) {
			t.Fatalf("%s: recovery event detail %q does not name %s", id, last.Detail, name)
		}
	}
	if got := len(e.events(t, "q", "q:applied")); got != 3 {
		t.Fatalf("applied effect: %d events, want 3 (untouched)", got)
	}
	if got := len(e.events(t, "q", "q:prepared")); got != 1 {
		t.Fatalf("prepared effect: %d events, want 1 (untouched)", got)
	}
	// The prepared effect was never sent: a new attempt may start; the
	// unknown ones follow their retry mode.
	if got, err := e.Journal.Prepare(e.ctx, prep("q:prepared", "c-new")); err != nil || got.Attempts != 2 {
		t.Fatalf("new attempt of the prepared effect: %+v, %v; want attempt 2", got, err)
	}
	if got, err := e.Journal.Prepare(e.ctx, prep("q:dispatched", "c-new")); err != nil || got.Attempts != 2 {
		t.Fatalf("new attempt of the unknown idempotency_key effect: %+v, %v; want attempt 2", got, err)
	}
	p := prep("q:reconcile", "c-new")
	p.RetryMode = touba.RetryReconcile
	if _, err := e.Journal.Prepare(e.ctx, p); touba.ErrorCode(err) != touba.EEffectReconciliationRequired {
		t.Fatalf("unknown reconcile effect: %v, want %s", err, touba.EEffectReconciliationRequired)
	}
}

// testRecoverAfterCrash: the old process is gone without closing; the new
// one's Recover makes its dispatched effects unknown and returns them.
func testRecoverAfterCrash(t *testing.T, f Factory) {
	dead := open(t, f, Options{})
	dead.leaveEffects(t)
	// A process does not recover what it holds itself.
	if got, err := dead.Journal.Recover(dead.ctx); err != nil || len(got) != 0 {
		t.Fatalf("recover by the holder: %+v, %v; want nothing", got, err)
	}
	e := dead.again(t)
	e.clock.Add(time.Minute)
	got, err := e.Journal.Recover(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].EffectID != "q:dispatched" || got[1].EffectID != "q:reconcile" ||
		got[0].State != touba.EffectUnknown || got[1].State != touba.EffectUnknown ||
		got[1].RetryMode != touba.RetryReconcile || !got[0].UpdatedAt.Equal(e.clock.Now()) {
		t.Fatalf("recovered %+v, want q:dispatched and q:reconcile, unknown, oldest first", got)
	}
	e.checkRecovered(t, true)
	if again, err := e.Journal.Recover(e.ctx); err != nil || len(again) != 0 {
		t.Fatalf("second recover: %+v, %v; want nothing", again, err)
	}
}

// testRecoverAfterRestart: after a clean stop and start, followed by
// Recover as the daemon does, the outcome is the same, whether the stop or
// the recovery recorded the unknowns. (A stop that records them need not
// name the start-up audit events: SQLite's Close writes "closed while
// dispatched".)
func testRecoverAfterRestart(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	e.leaveEffects(t)
	e = e.reopen(t)
	if _, err := e.Journal.Recover(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.checkRecovered(t, false)
}

// testLateFinish: a call whose effect was recovered by a new process
// learns it on its late Finish (the outcome is not recorded), and no longer
// blocks the identity.
func testLateFinish(t *testing.T, f Factory) {
	old := open(t, f, Options{})
	old.bringTo(t, "q:step", touba.EffectDispatched, touba.RetryIdempotencyKey)
	if _, err := old.again(t).Journal.Recover(old.ctx); err != nil {
		t.Fatal(err)
	}
	err := old.Journal.Finish(old.ctx, outcome("q:step", "c1", touba.EffectApplied))
	if got := errorIs(err); got != "ErrTransition" {
		t.Fatalf("late finish: %q (%v), want ErrTransition", got, err)
	}
	if st := old.effect(t, "q", "q:step").State; st != touba.EffectUnknown {
		t.Fatalf("state %s after the late finish, want unknown", st)
	}
	if got, err := old.Journal.Prepare(old.ctx, prep("q:step", "c2")); err != nil || got.Attempts != 2 {
		t.Fatalf("prepare after the late finish: %+v, %v; want attempt 2", got, err)
	}
}

// testJournalDurable: every transition is on disk when its call returns.
func testJournalDurable(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	e.bringTo(t, "q:step", touba.EffectApplied, touba.RetryNone)
	other := e.again(t)
	if ef := other.effect(t, "q", "q:step"); ef.State != touba.EffectApplied || ef.ReceiptRef != "order:42" {
		t.Fatalf("seen by another handle: %+v", ef)
	}
	e = e.reopen(t)
	ef := e.effect(t, "q", "q:step")
	if ef.State != touba.EffectApplied || !jsonEqual(t, ef.Result, json.RawMessage(`{"id":42}`)) || len(e.events(t, "q", "q:step")) != 3 {
		t.Fatalf("after restart: %+v", ef)
	}
}
