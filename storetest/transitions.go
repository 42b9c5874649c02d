package storetest

import (
	"testing"

	touba "github.com/touba/touba-trigger"
)

// runTransitions checks the journal's state machine (SPEC §5) call by call:
// from each state, what each call does, the error it gets, and that a
// refused call changes nothing and appends no event. An applied effect is
// never rewritten.
func runTransitions(t *testing.T, f Factory) {
	type call func(e *env) error
	finish := func(state string) call {
		return func(e *env) error { return e.Journal.Finish(e.ctx, outcome("q:step", "c1", state)) }
	}
	finishBy := func(callID, state string) call {
		return func(e *env) error { return e.Journal.Finish(e.ctx, outcome("q:step", callID, state)) }
	}
	prepare := func(callID string) call {
		return func(e *env) error { _, err := e.Journal.Prepare(e.ctx, prep("q:step", callID)); return err }
	}
	dispatch := func(callID string) call {
		return func(e *env) error { return e.Journal.Dispatch(e.ctx, "q", "q:step", callID) }
	}
	resolve := func(r touba.EffectResolution) call {
		return func(e *env) error { return e.Journal.Resolve(e.ctx, "q", "q:step", r) }
	}
	conflicting := func(e *env) error {
		p := prep("q:step", "c2")
		p.Fingerprint = "sha256:other"
		_, err := e.Journal.Prepare(e.ctx, p)
		return err
	}
	applied := touba.EffectResolution{State: touba.EffectApplied, ReceiptRef: "r"}
	notApplied := touba.EffectResolution{State: touba.EffectNotApplied}
	idem, reconcile, none := touba.RetryIdempotencyKey, touba.RetryReconcile, touba.RetryNone
	prepared, dispatched := touba.EffectPrepared, touba.EffectDispatched
	isApplied, isNotApplied, unknown := touba.EffectApplied, touba.EffectNotApplied, touba.EffectUnknown
	tests := []struct {
		name      string
		from      string // "" for no effect yet
		retryMode string
		do        call
		wantErr   string // errorIs of the error
		wantState string
	}{
		{"new/prepare", "", idem, prepare("c1"), "", prepared},
		{"new/dispatch", "", idem, dispatch("c1"), "?", ""},
		{"new/finish", "", idem, finish(isApplied), "?", ""},
		{"prepared/dispatch", prepared, idem, dispatch("c1"), "", dispatched},
		{"prepared/dispatch by another call", prepared, idem, dispatch("c2"), touba.EEffectInProgress, prepared},
		{"prepared/prepare by another call", prepared, idem, prepare("c2"), touba.EEffectInProgress, prepared},
		{"prepared/finish by another call", prepared, idem, finishBy("c2", isNotApplied), touba.EEffectInProgress, prepared},
		{"prepared/finish not_applied", prepared, idem, finish(isNotApplied), "", isNotApplied},
		{"prepared/resolve", prepared, idem, resolve(notApplied), touba.EEffectNotUnknown, prepared},
		{"dispatched/finish applied", dispatched, idem, finish(isApplied), "", isApplied},
		{"dispatched/finish not_applied", dispatched, idem, finish(isNotApplied), "", isNotApplied},
		{"dispatched/finish unknown", dispatched, idem, finish(unknown), "", unknown},
		{"dispatched/finish by another call", dispatched, idem, finishBy("c2", isApplied), touba.EEffectInProgress, dispatched},
		{"dispatched/dispatch again", dispatched, idem, dispatch("c1"), "ErrTransition", dispatched},
		{"dispatched/prepare", dispatched, idem, prepare("c2"), touba.EEffectInProgress, dispatched},
		{"dispatched/resolve", dispatched, idem, resolve(applied), touba.EEffectNotUnknown, dispatched},
		{"applied/prepare", isApplied, idem, prepare("c2"), "ErrEffectApplied", isApplied},
		{"applied/prepare other fingerprint", isApplied, idem, conflicting, touba.EEffectRequestConflict, isApplied},
		{"applied/dispatch", isApplied, idem, dispatch("c1"), "ErrTransition", isApplied},
		{"applied/finish applied", isApplied, idem, finish(isApplied), "ErrTransition", isApplied},
		{"applied/finish not_applied", isApplied, idem, finish(isNotApplied), "ErrTransition", isApplied},
		{"applied/finish unknown", isApplied, idem, finish(unknown), "ErrTransition", isApplied},
		{"applied/finish by another call", isApplied, idem, finishBy("c2", isNotApplied), "ErrTransition", isApplied},
		{"applied/resolve not_applied", isApplied, idem, resolve(notApplied), touba.EEffectNotUnknown, isApplied},
		{"applied/resolve applied", isApplied, idem, resolve(applied), touba.EEffectNotUnknown, isApplied},
		{"not_applied/prepare", isNotApplied, none, prepare("c2"), "", prepared},
		{"not_applied/prepare other fingerprint", isNotApplied, idem, conflicting, touba.EEffectRequestConflict, isNotApplied},
		{"not_applied/dispatch", isNotApplied, idem, dispatch("c1"), "ErrTransition", isNotApplied},
		{"not_applied/finish applied", isNotApplied, idem, finish(isApplied), "ErrTransition", isNotApplied},
		{"not_applied/resolve", isNotApplied, idem, resolve(applied), touba.EEffectNotUnknown, isNotApplied},
		{"unknown idempotency_key/prepare", unknown, idem, prepare("c2"), "", prepared},
		{"unknown reconcile/prepare", unknown, reconcile, prepare("c2"), touba.EEffectReconciliationRequired, unknown},
		{"unknown none/prepare", unknown, none, prepare("c2"), touba.EEffectOutcomeUnknown, unknown},
		{"unknown/prepare other fingerprint", unknown, idem, conflicting, touba.EEffectRequestConflict, unknown},
		{"unknown/dispatch", unknown, idem, dispatch("c1"), "ErrTransition", unknown},
		{"unknown/finish applied", unknown, idem, finish(isApplied), "ErrTransition", unknown},
		{"unknown/resolve applied", unknown, none, resolve(applied), "", isApplied},
		{"unknown/resolve not_applied", unknown, reconcile, resolve(notApplied), "", isNotApplied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := open(t, f, Options{})
			if tt.from != "" {
				e.bringTo(t, "q:step", tt.from, tt.retryMode)
			}
			before := e.events(t, "q", "q:step")
			err := tt.do(e)
			switch got := errorIs(err); {
			case tt.wantErr == "?" && err == nil:
				t.Fatal("accepted, want refused")
			case tt.wantErr != "?" && got != tt.wantErr:
				t.Fatalf("error %q (%v), want %q", got, err, tt.wantErr)
			}
			if tt.wantState == "" {
				if got, err := e.Journal.Get(e.ctx, "q", "q:step"); got != nil || err != nil {
					t.Fatalf("a refused call created %+v (%v)", got, err)
				}
				return
			}
			if got := e.effect(t, "q", "q:step").State; got != tt.wantState {
				t.Fatalf("state=%s, want %s", got, tt.wantState)
			}
			after := e.events(t, "q", "q:step")
			wantEvents := len(before)
			if err == nil {
				wantEvents++
			}
			if len(after) != wantEvents {
				t.Fatalf("events=%d, want %d", len(after), wantEvents)
			}
			if err == nil && after[len(after)-1].State != tt.wantState {
				t.Fatalf("last event state=%s, want %s", after[len(after)-1].State, tt.wantState)
			}
			if tt.from == isApplied {
				if ef := e.effect(t, "q", "q:step"); ef.ReceiptRef != "order:42" || !jsonEqual(t, ef.Result, []byte(`{"id":42}`)) {
					t.Fatalf("applied effect rewritten: %+v", ef)
				}
			}
		})
	}
}
