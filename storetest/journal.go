package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// The effect journal (SPEC §5): the reservation, its race, the stored
// outcome, the audit trail and the listings.
func runJournal(t *testing.T, f Factory) {
	t.Run("PrepareCreatesAttemptOne", func(t *testing.T) { testPrepare(t, f) })
	t.Run("ReservationRace", func(t *testing.T) { testPrepareRace(t, f, false) })
	t.Run("ReservationRaceAcrossHandles", func(t *testing.T) { testPrepareRace(t, f, true) })
	t.Run("OutcomeStored", func(t *testing.T) { testOutcomeStored(t, f) })
	t.Run("NewAttemptCountsAndClears", func(t *testing.T) { testNewAttempt(t, f) })
	t.Run("RefusedReturnsStoredEffect", func(t *testing.T) { testRefusedStored(t, f) })
	t.Run("UnknownTakesTheStricterMode", func(t *testing.T) { testStricterMode(t, f) })
	t.Run("EventsInOrder", func(t *testing.T) { testEventsInOrder(t, f) })
	t.Run("ListFiltersAndOrder", func(t *testing.T) { testEffectList(t, f) })
	t.Run("CountByState", func(t *testing.T) { testCountByState(t, f) })
	t.Run("DispatchRecordsTheRequest", func(t *testing.T) { testDispatchRequest(t, f) })
}

// prep is a valid Prepare of an idempotency_key effect of scope q.
func prep(effectID, callID string) touba.EffectPrepare {
	return touba.EffectPrepare{Scope: "q", EffectID: effectID, ToolRef: "tool:examples.orders/CreateOrder",
		Operation: touba.OperationInvoke, Fingerprint: "sha256:00ff", RetryMode: touba.RetryIdempotencyKey, CallID: callID}
}

// outcome is call's outcome state for effect q/effectID.
func outcome(effectID, callID, state string) touba.EffectOutcome {
	return touba.EffectOutcome{Scope: "q", EffectID: effectID, CallID: callID, State: state}
}

// effect reads an effect that must exist.
func (e *env) effect(t *testing.T, scope, effectID string) *touba.Effect {
	t.Helper()
	got, err := e.Journal.Get(e.ctx, scope, effectID)
	if err != nil || got == nil {
		t.Fatalf("get %s/%s: %v, %v", scope, effectID, got, err)
	}
	return got
}

func (e *env) events(t *testing.T, scope, effectID string) []touba.EffectEvent {
	t.Helper()
	ev, err := e.Journal.Events(e.ctx, scope, effectID)
	if err != nil {
		t.Fatalf("events %s/%s: %v", scope, effectID, err)
	}
	return ev
}

// bringTo walks effect q/effectID to state through the API with call
// "c1": prepared, dispatched, applied (receipt order:42, result {"id":42}),
// not_applied (from prepared) or unknown (reported by the call).
func (e *env) bringTo(t *testing.T, effectID, state, retryMode string) {
	t.Helper()
	p := prep(effectID, "c1")
	p.RetryMode = retryMode
	if _, err := e.Journal.Prepare(e.ctx, p); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if state == touba.EffectPrepared {
		return
	}
	if state != touba.EffectNotApplied {
		if err := e.Journal.Dispatch(e.ctx, "q", effectID, "c1"); err != nil {
			t.Fatalf("dispatch: %v", err)
		}
		if state == touba.EffectDispatched {
			return
		}
	}
	o := outcome(effectID, "c1", state)
	if state == touba.EffectApplied {
		o.ReceiptRef, o.Result = "order:42", json.RawMessage(`{"id":42}`)
	}
	if err := e.Journal.Finish(e.ctx, o); err != nil {
		t.Fatalf("finish %s: %v", state, err)
	}
}

// errorIs names err for comparisons: a sentinel, else the public code.
func errorIs(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, touba.ErrEffectApplied):
		return "ErrEffectApplied"
	case errors.Is(err, touba.ErrTransition):
		return "ErrTransition"
	case errors.Is(err, touba.ErrNotCompensable):
		return "ErrNotCompensable"
	}
	return touba.ErrorCode(err)
}

func testPrepare(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	p := prep("q:step", "c1")
	got, err := e.Journal.Prepare(e.ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	stored := e.effect(t, "q", "q:step")
	for name, ef := range map[string]*touba.Effect{"returned": got, "stored": stored} {
		if ef.Scope != "q" || ef.EffectID != "q:step" || ef.ToolRef != p.ToolRef || ef.Operation != touba.OperationInvoke ||
			ef.Fingerprint != p.Fingerprint || ef.RetryMode != p.RetryMode || ef.State != touba.EffectPrepared ||
			ef.Attempts != 1 || ef.CallID != "c1" || ef.ReceiptRef != "" || ef.Result != nil || ef.ErrorCode != "" ||
			!ef.CreatedAt.Equal(Epoch) || !ef.UpdatedAt.Equal(Epoch) {
			t.Fatalf("%s effect %+v", name, ef)
		}
	}
	ev := e.events(t, "q", "q:step")
	if len(ev) != 1 || ev[0].State != touba.EffectPrepared || ev[0].CallID != "c1" || !ev[0].At.Equal(Epoch) ||
		ev[0].Scope != "q" || ev[0].EffectID != "q:step" {
		t.Fatalf("events %+v, want one prepared event of c1", ev)
	}
	if none, err := e.Journal.Get(e.ctx, "q", "q:none"); none != nil || err != nil {
		t.Fatalf("get of a missing effect: %v, %v; want nil, nil", none, err)
	}
	for name, bad := range map[string]func(*touba.EffectPrepare){
		"no scope":       func(p *touba.EffectPrepare) { p.Scope = "" },
		"no call id":     func(p *touba.EffectPrepare) { p.CallID = "" },
		"no fingerprint": func(p *touba.EffectPrepare) { p.Fingerprint = "" },
		"bad retry mode": func(p *touba.EffectPrepare) { p.RetryMode = "sometimes" },
		"bad operation":  func(p *touba.EffectPrepare) { p.Operation = "delete" },
	} {
		p := prep("q:bad", "c9")
		bad(&p)
		if _, err := e.Journal.Prepare(e.ctx, p); err == nil {
			t.Errorf("prepare with %s: accepted", name)
		}
	}
	if got, err := e.Journal.Get(e.ctx, "q", "q:bad"); got != nil || err != nil {
		t.Fatalf("a refused prepare stored %+v (%v)", got, err)
	}
}

// testPrepareRace: of many callers of one identity released at once, one
// wins; every other gets EffectInProgress. The same holds for the new
// attempt of a released effect. Across handles only the storage itself
// can decide.
func testPrepareRace(t *testing.T, f Factory, handles bool) {
	e := open(t, f, Options{})
	journals := []touba.EffectJournal{e.Journal}
	if handles {
		journals = append(journals, e.again(t).Journal)
	}
	race := func(round int) int {
		t.Helper()
		const calls = 50
		start := make(chan struct{})
		errs := make([]error, calls)
		var wg sync.WaitGroup
		for i := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = journals[i%len(journals)].Prepare(e.ctx, prep("q:step", fmt.Sprintf("r%d-call-%d", round, i)))
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			if err == nil {
				if winner >= 0 {
					t.Fatalf("round %d: callers %d and %d both won", round, winner, i)
				}
				winner = i
			} else if got := touba.ErrorCode(err); got != touba.EEffectInProgress {
				t.Fatalf("round %d, caller %d: %v (code %s), want %s", round, i, err, got, touba.EEffectInProgress)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody won", round)
		}
		return winner
	}
	w := race(1)
	ef := e.effect(t, "q", "q:step")
	if ef.Attempts != 1 || ef.CallID != fmt.Sprintf("r1-call-%d", w) {
		t.Fatalf("after the race: %+v, want attempt 1 held by the winner", ef)
	}
	if got := len(e.events(t, "q", "q:step")); got != 1 {
		t.Fatalf("%d events, want 1", got)
	}
	// Only the winner, through its own handle, may end it.
	holder := journals[w%len(journals)]
	o := outcome("q:step", ef.CallID, touba.EffectNotApplied)
	if handles {
		other := journals[(w+1)%len(journals)]
		if got := touba.ErrorCode(other.Finish(e.ctx, o)); got != touba.EEffectInProgress {
			t.Fatalf("finish through the other handle: code %s, want %s", got, touba.EEffectInProgress)
		}
	}
	if err := holder.Finish(e.ctx, o); err != nil {
		t.Fatalf("finish by the winner: %v", err)
	}
	w = race(2)
	if ef := e.effect(t, "q", "q:step"); ef.Attempts != 2 || ef.CallID != fmt.Sprintf("r2-call-%d", w) {
		t.Fatalf("after the second race: %+v, want attempt 2 held by its winner", ef)
	}
}

func testOutcomeStored(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	e.bringTo(t, "q:step", touba.EffectDispatched, touba.RetryIdempotencyKey)
	e.clock.Add(time.Second)
	o := outcome("q:step", "c1", touba.EffectApplied)
	o.ReceiptRef, o.Result, o.ErrorCode, o.ReceiptErrorCode = "order:7", json.RawMessage(`{"id":7,"ok":true}`), "", ""
	if err := e.Journal.Finish(e.ctx, o); err != nil {
		t.Fatal(err)
	}
	ef := e.effect(t, "q", "q:step")
	if ef.State != touba.EffectApplied || ef.ReceiptRef != "order:7" || !jsonEqual(t, ef.Result, o.Result) ||
		!ef.UpdatedAt.Equal(Epoch.Add(time.Second)) || !ef.CreatedAt.Equal(Epoch) || ef.Attempts != 1 {
		t.Fatalf("stored %+v", ef)
	}
	// An unknown outcome keeps the codes the call reported.
	e.bringTo(t, "q:other", touba.EffectDispatched, touba.RetryNone)
	u := outcome("q:other", "c1", touba.EffectUnknown)
	u.ErrorCode, u.ReceiptErrorCode = touba.EHandlerTimeout, touba.EEffectReceiptMissing
	if err := e.Journal.Finish(e.ctx, u); err != nil {
		t.Fatal(err)
	}
	if ef := e.effect(t, "q", "q:other"); ef.State != touba.EffectUnknown || ef.ErrorCode != touba.EHandlerTimeout ||
		ef.ReceiptErrorCode != touba.EEffectReceiptMissing || ef.Result != nil {
		t.Fatalf("stored %+v", ef)
	}
	if err := e.Journal.Finish(e.ctx, outcome("q:step", "c1", touba.EffectPrepared)); err == nil {
		t.Fatal("finish as prepared accepted")
	}
}

// testNewAttempt: a new attempt of an unknown idempotency_key effect
// counts, takes the new call id, clears the old outcome, and the old
// holder's late answer is refused.
func testNewAttempt(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	e.bringTo(t, "q:step", touba.EffectDispatched, touba.RetryIdempotencyKey)
	u := outcome("q:step", "c1", touba.EffectUnknown)
	u.ErrorCode = touba.EHandlerTimeout
	if err := e.Journal.Finish(e.ctx, u); err != nil {
		t.Fatal(err)
	}
	got, err := e.Journal.Prepare(e.ctx, prep("q:step", "c2"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Attempts != 2 || got.CallID != "c2" || got.State != touba.EffectPrepared || got.ErrorCode != "" {
		t.Fatalf("new attempt %+v", got)
	}
	if ef := e.effect(t, "q", "q:step"); ef.Attempts != 2 || ef.CallID != "c2" || ef.ErrorCode != "" {
		t.Fatalf("stored %+v", ef)
	}
	err = e.Journal.Finish(e.ctx, outcome("q:step", "c1", touba.EffectApplied))
	if got := touba.ErrorCode(err); got != touba.EEffectInProgress {
		t.Fatalf("late finish of c1: %v (code %s), want %s", err, got, touba.EEffectInProgress)
	}
	if ef := e.effect(t, "q", "q:step"); ef.State != touba.EffectPrepared || ef.CallID != "c2" {
		t.Fatalf("after the late finish: %+v", ef)
	}
}

func testRefusedStored(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	e.bringTo(t, "q:step", touba.EffectApplied, touba.RetryNone)
	got, err := e.Journal.Prepare(e.ctx, prep("q:step", "c2"))
	var refused *touba.RefusedError
	if !errors.As(err, &refused) || !errors.Is(err, touba.ErrEffectApplied) || refused.Code != "" || got == nil {
		t.Fatalf("prepare of applied: %+v, %v; want the stored effect and a RefusedError matching ErrEffectApplied", got, err)
	}
	if got.ReceiptRef != "order:42" || !jsonEqual(t, got.Result, json.RawMessage(`{"id":42}`)) ||
		refused.Effect.ReceiptRef != "order:42" || got.State != touba.EffectApplied {
		t.Fatalf("returned %+v / %+v, want the applied row with its result", got, refused.Effect)
	}
}

// testStricterMode: an unknown effect stored with idempotency_key, whose
// binding is now reconcile or none, takes the stricter mode.
func testStricterMode(t *testing.T, f Factory) {
	for mode, code := range map[string]string{touba.RetryReconcile: touba.EEffectReconciliationRequired,
		touba.RetryNone: touba.EEffectOutcomeUnknown} {
		e := open(t, f, Options{})
		e.bringTo(t, "q:step", touba.EffectUnknown, touba.RetryIdempotencyKey)
		p := prep("q:step", "c2")
		p.RetryMode = mode
		_, err := e.Journal.Prepare(e.ctx, p)
		var refused *touba.RefusedError
		if !errors.As(err, &refused) || refused.Code != code || touba.ErrorCode(err) != code {
			t.Fatalf("unknown idempotency_key prepared as %s: %v, want code %s", mode, err, code)
		}
	}
}

func testEventsInOrder(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	e.bringTo(t, "q:step", touba.EffectNotApplied, touba.RetryIdempotencyKey)
	e.clock.Add(time.Second)
	if _, err := e.Journal.Prepare(e.ctx, prep("q:step", "c2")); err != nil {
		t.Fatal(err)
	}
	for _, step := range []func() error{
		func() error { return e.Journal.Dispatch(e.ctx, "q", "q:step", "c2") },
		func() error { return e.Journal.Finish(e.ctx, outcome("q:step", "c2", touba.EffectApplied)) },
	} {
		e.clock.Add(time.Second)
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	ev := e.events(t, "q", "q:step")
	want := []struct{ state, call string }{{touba.EffectPrepared, "c1"}, {touba.EffectNotApplied, "c1"},
		{touba.EffectPrepared, "c2"}, {touba.EffectDispatched, "c2"}, {touba.EffectApplied, "c2"}}
	if len(ev) != len(want) {
		t.Fatalf("%d events %+v, want %d", len(ev), ev, len(want))
	}
	for i, w := range want {
		if ev[i].State != w.state || ev[i].CallID != w.call || (i > 0 && (ev[i].Seq <= ev[i-1].Seq || ev[i].At.Before(ev[i-1].At))) {
			t.Fatalf("event %d: %+v, want %s by %s after the one before", i, ev[i], w.state, w.call)
		}
	}
	if !ev[4].At.Equal(Epoch.Add(3 * time.Second)) {
		t.Fatalf("last event at %v, want the clock's %v", ev[4].At, Epoch.Add(3*time.Second))
	}
	if other := e.events(t, "q", "q:none"); len(other) != 0 {
		t.Fatalf("events of a missing effect: %+v", other)
	}
}
