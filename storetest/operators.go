package storetest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// What operators do to the journal (SPEC §5, §6): resolve an unknown
// effect, compensate an applied one; and the refusal to store a secret.
func runJournalOperators(t *testing.T, f Factory) {
	t.Run("ResolveApplied", func(t *testing.T) { testResolveApplied(t, f) })
	t.Run("ResolveNotAppliedReleases", func(t *testing.T) { testResolveNotApplied(t, f) })
	t.Run("ResolveRefusals", func(t *testing.T) { testResolveRefusals(t, f) })
	t.Run("Compensation", func(t *testing.T) { testCompensation(t, f) })
	t.Run("SecretRefusedInIdentity", func(t *testing.T) { testSecretIdentity(t, f) })
	t.Run("SecretRefusedInOutcome", func(t *testing.T) { testSecretOutcome(t, f) })
	t.Run("SecretRefusedInResolve", func(t *testing.T) { testSecretResolve(t, f) })
}

func testResolveApplied(t *testing.T, f Factory) {
	for name, tt := range map[string]struct {
		result, want string
	}{
		"default result": {"", `{"receipt_ref":"order:42"}`},
		"given result":   {`{"id":7}`, `{"id":7}`},
	} {
		t.Run(name, func(t *testing.T) {
			e := open(t, f, Options{})
			e.bringTo(t, "q:step", touba.EffectUnknown, touba.RetryNone)
			r := touba.EffectResolution{State: touba.EffectApplied, ReceiptRef: "order:42", Operator: "alice"}
			if tt.result != "" {
				r.Result = json.RawMessage(tt.result)
			}
			if err := e.Journal.Resolve(e.ctx, "q", "q:step", r); err != nil {
				t.Fatal(err)
			}
			ef := e.effect(t, "q", "q:step")
			if ef.State != touba.EffectApplied || ef.ReceiptRef != "order:42" || !jsonEqual(t, ef.Result, json.RawMessage(tt.want)) {
				t.Fatalf("resolved %+v, want applied with receipt order:42 and result %s", ef, tt.want)
			}
			ev := e.events(t, "q", "q:step")
			if last := ev[len(ev)-1]; last.State != touba.EffectApplied || !strings.Contains(last.Detail, "alice") {
				t.Fatalf("audit event %+v, want applied naming the operator", last)
			}
			// Applied now: the next run reads the result back.
			if _, err := e.Journal.Prepare(e.ctx, prep("q:step", "c2")); !errors.Is(err, touba.ErrEffectApplied) {
				t.Fatalf("prepare after resolve: %v, want ErrEffectApplied", err)
			}
		})
	}
}

func testResolveNotApplied(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	e.bringTo(t, "q:step", touba.EffectUnknown, touba.RetryReconcile)
	if err := e.Journal.Resolve(e.ctx, "q", "q:step", touba.EffectResolution{State: touba.EffectNotApplied}); err != nil {
		t.Fatal(err)
	}
	if ef := e.effect(t, "q", "q:step"); ef.State != touba.EffectNotApplied || ef.Result != nil || ef.ReceiptRef != "" {
		t.Fatalf("resolved %+v, want not_applied", ef)
	}
	p := prep("q:step", "c2")
	p.RetryMode = touba.RetryReconcile
	got, err := e.Journal.Prepare(e.ctx, p)
	if err != nil || got.EffectID != "q:step" || got.Attempts != 2 || got.State != touba.EffectPrepared {
		t.Fatalf("new attempt after not_applied: %+v, %v; want q:step prepared, attempt 2", got, err)
	}
}

func testResolveRefusals(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	e.bringTo(t, "q:step", touba.EffectUnknown, touba.RetryNone)
	for name, r := range map[string]touba.EffectResolution{
		"applied without receipt":    {State: touba.EffectApplied},
		"invalid result":             {State: touba.EffectApplied, ReceiptRef: "r", Result: json.RawMessage(`{`)},
		"not applied with a receipt": {State: touba.EffectNotApplied, ReceiptRef: "r"},
		"not a verdict":              {State: touba.EffectUnknown},
	} {
		if err := e.Journal.Resolve(e.ctx, "q", "q:step", r); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := e.Journal.Resolve(e.ctx, "q", "q:missing", touba.EffectResolution{State: touba.EffectNotApplied}); err == nil {
		t.Error("resolve of a missing effect: accepted")
	}
	if ef := e.effect(t, "q", "q:step"); ef.State != touba.EffectUnknown || len(e.events(t, "q", "q:step")) != 3 {
		t.Fatalf("after refused resolutions: %+v, want unknown with its three events", ef)
	}
}

// testCompensation: a compensation is a distinct effect (CompensationID,
// operation compensate), only of an applied original, which stays applied.
func testCompensation(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	comp := prep(touba.CompensationID("q:step"), "k1")
	comp.Operation = touba.OperationCompensate
	if _, err := e.Journal.Prepare(e.ctx, comp); !errors.Is(err, touba.ErrNotCompensable) {
		t.Fatalf("compensation of a missing effect: %v, want ErrNotCompensable", err)
	}
	e.bringTo(t, "q:step", touba.EffectDispatched, touba.RetryIdempotencyKey)
	if _, err := e.Journal.Prepare(e.ctx, comp); !errors.Is(err, touba.ErrNotCompensable) {
		t.Fatalf("compensation of a dispatched effect: %v, want ErrNotCompensable", err)
	}
	if err := e.Journal.Finish(e.ctx, touba.EffectOutcome{Scope: "q", EffectID: "q:step", CallID: "c1",
		State: touba.EffectApplied, ReceiptRef: "order:42", Result: json.RawMessage(`{"id":42}`)}); err != nil {
		t.Fatal(err)
	}
	invoke := prep(touba.CompensationID("q:step"), "k1")
	if _, err := e.Journal.Prepare(e.ctx, invoke); err == nil {
		t.Fatal("operation invoke with a compensation id accepted")
	}
	wrongID := prep("q:other", "k1")
	wrongID.Operation = touba.OperationCompensate
	if _, err := e.Journal.Prepare(e.ctx, wrongID); err == nil {
		t.Fatal("operation compensate with a plain effect id accepted")
	}
	got, err := e.Journal.Prepare(e.ctx, comp)
	if err != nil {
		t.Fatal(err)
	}
	if got.EffectID != "q:step:compensate" || got.Operation != touba.OperationCompensate || got.Attempts != 1 ||
		got.State != touba.EffectPrepared {
		t.Fatalf("compensation %+v", got)
	}
	if err := e.Journal.Dispatch(e.ctx, "q", got.EffectID, "k1"); err != nil {
		t.Fatal(err)
	}
	if err := e.Journal.Finish(e.ctx, touba.EffectOutcome{Scope: "q", EffectID: got.EffectID, CallID: "k1",
		State: touba.EffectApplied, ReceiptRef: "refund:1"}); err != nil {
		t.Fatal(err)
	}
	if ef := e.effect(t, "q", "q:step"); ef.State != touba.EffectApplied || ef.ReceiptRef != "order:42" {
		t.Fatalf("original after its compensation: %+v, want applied as it was", ef)
	}
	if ef := e.effect(t, "q", "q:step:compensate"); ef.State != touba.EffectApplied || ef.ReceiptRef != "refund:1" {
		t.Fatalf("compensation stored %+v", ef)
	}
}

// theSecret is a resolved secret value; "/" makes its JSON escaping differ.
const theSecret = "hunter2-tok/en"

// wantSecretRefused checks the code of err, and that the message does not
// repeat the secret.
func wantSecretRefused(t *testing.T, what string, err error) {
	t.Helper()
	if got := touba.ErrorCode(err); got != touba.ESecretValueRefused {
		t.Fatalf("%s: code %s (%v), want %s", what, got, err, touba.ESecretValueRefused)
	}
	if strings.Contains(err.Error(), theSecret) {
		t.Fatalf("%s: the error repeats the secret: %v", what, err)
	}
}

func testSecretIdentity(t *testing.T, f Factory) {
	e := open(t, f, Options{Secrets: []string{theSecret}})
	for name, p := range map[string]touba.EffectPrepare{
		"scope":     {Scope: "q-" + theSecret, EffectID: "q:step"},
		"effect id": {Scope: "q", EffectID: "q:" + theSecret},
		"call id":   {Scope: "q", EffectID: "q:step", CallID: theSecret},
	} {
		full := prep(p.EffectID, "c1")
		full.Scope = p.Scope
		if p.CallID != "" {
			full.CallID = p.CallID
		}
		got, err := e.Journal.Prepare(e.ctx, full)
		wantSecretRefused(t, name, err)
		if got != nil {
			t.Fatalf("%s: returned %+v", name, got)
		}
	}
	if all, err := e.Journal.List(e.ctx, touba.EffectFilter{}); err != nil || len(all) != 0 {
		t.Fatalf("stored %d effects (%v), want none", len(all), err)
	}
}

// testSecretOutcome: an outcome holding a secret keeps its state (the
// write happened) but not its receipt, result or codes; error_code says
// SecretValueRefused. Without the secret configured the same is stored.
func testSecretOutcome(t *testing.T, f Factory) {
	escaped := `"hunter2-tok\/en"` // the same string, JSON-escaped
	for name, o := range map[string]touba.EffectOutcome{
		"result":         {Result: json.RawMessage(`{"token":"` + theSecret + `"}`)},
		"escaped result": {Result: json.RawMessage(`{"token":` + escaped + `}`)},
		"receipt":        {ReceiptRef: "order:" + theSecret, Result: json.RawMessage(`{}`)},
		"detail":         {Detail: "failed with " + theSecret, Result: json.RawMessage(`{}`)},
	} {
		t.Run(name, func(t *testing.T) {
			e := open(t, f, Options{Secrets: []string{theSecret}})
			e.bringTo(t, "q:step", touba.EffectDispatched, touba.RetryIdempotencyKey)
			o.Scope, o.EffectID, o.CallID, o.State = "q", "q:step", "c1", touba.EffectApplied
			wantSecretRefused(t, "finish", e.Journal.Finish(e.ctx, o))
			ef := e.effect(t, "q", "q:step")
			if ef.State != touba.EffectApplied || ef.Result != nil || ef.ReceiptRef != "" || ef.ErrorCode != touba.ESecretValueRefused {
				t.Fatalf("stored %+v, want applied, no result or receipt, error SecretValueRefused", ef)
			}
			for _, ev := range e.events(t, "q", "q:step") {
				if strings.Contains(ev.Detail, theSecret) {
					t.Fatalf("event detail holds the secret: %q", ev.Detail)
				}
			}
			// Released: a new call sees the applied effect.
			if _, err := e.Journal.Prepare(e.ctx, prep("q:step", "c2")); !errors.Is(err, touba.ErrEffectApplied) {
				t.Fatalf("prepare after the refused finish: %v, want ErrEffectApplied", err)
			}
		})
	}
	t.Run("not a secret here", func(t *testing.T) {
		e := open(t, f, Options{})
		e.bringTo(t, "q:step", touba.EffectDispatched, touba.RetryIdempotencyKey)
		o := touba.EffectOutcome{Scope: "q", EffectID: "q:step", CallID: "c1", State: touba.EffectApplied,
			ReceiptRef: "order:" + theSecret, Result: json.RawMessage(`{"token":"` + theSecret + `"}`)}
		if err := e.Journal.Finish(e.ctx, o); err != nil {
			t.Fatal(err)
		}
		if ef := e.effect(t, "q", "q:step"); ef.ReceiptRef != o.ReceiptRef || !jsonEqual(t, ef.Result, o.Result) {
			t.Fatalf("stored %+v, want the outcome as given", ef)
		}
	})
}

func testSecretResolve(t *testing.T, f Factory) {
	e := open(t, f, Options{Secrets: []string{theSecret}})
	e.bringTo(t, "q:step", touba.EffectUnknown, touba.RetryNone)
	for name, r := range map[string]touba.EffectResolution{
		"receipt": {State: touba.EffectApplied, ReceiptRef: theSecret},
		"result":  {State: touba.EffectApplied, ReceiptRef: "order:1", Result: json.RawMessage(`["` + theSecret + `"]`)},
	} {
		wantSecretRefused(t, name, e.Journal.Resolve(e.ctx, "q", "q:step", r))
	}
	if ef := e.effect(t, "q", "q:step"); ef.State != touba.EffectUnknown || ef.ReceiptRef != "" {
		t.Fatalf("after refused resolutions: %+v, want unknown, nothing stored", ef)
	}
}
