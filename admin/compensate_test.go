package admin_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// Resolving a compensation is an operator action like any other: it is in
// the audit trail, and it leaves the entry it undid where it is.
func TestResolveCompensationIsAudited(t *testing.T) {
	f := mustFiles(t)
	ctx := context.Background()
	q := f.entry(t, "e", "1", touba.StatusParked)
	orig := f.effect(t, q, "charge", touba.RetryReconcile, touba.EffectApplied)
	comp, call := touba.CompensationID(orig), "call-comp"
	if _, err := f.j.Prepare(ctx, touba.EffectPrepare{Scope: q, EffectID: comp, ToolRef: "tool:t", Operation: touba.OperationCompensate,
		Fingerprint: "sha256:comp", RetryMode: touba.RetryReconcile, CallID: call}); err != nil {
		t.Fatal(err)
	}
	if err := f.j.Dispatch(ctx, q, comp, call); err != nil {
		t.Fatal(err)
	}
	if err := f.j.Finish(ctx, touba.EffectOutcome{Scope: q, EffectID: comp, CallID: call, State: touba.EffectUnknown}); err != nil {
		t.Fatal(err)
	}
	res, err := f.svc.Resolve(admin.WithOperator(ctx, "uid 0 pid 1 (test)"),
		admin.ResolveRequest{Scope: q, EffectID: comp, State: touba.EffectApplied, ReceiptRef: "refund:7"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Replayed || f.status(t, q) != touba.StatusParked {
		t.Fatalf("resolving a compensation moved its entry: %+v", res)
	}
	ev := f.operatorEvents(t, q)
	if len(ev) != 1 || ev[0].Action != "effects.resolve" || ev[0].Outcome != "done" || ev[0].Target != q+"/"+comp ||
		ev[0].Operator != "uid 0 pid 1 (test)" {
		t.Fatalf("audit trail: %+v, want one effects.resolve of %s by the operator", ev, comp)
	}
}

// The race of `effects compensate` and `queue replay`, forced: a replay
// that comes between the compensation's status check and its handler call
// is refused, so the entry does not run again while its write is undone.
func TestCompensateHoldsEntryAgainstReplay(t *testing.T) {
	f := mustFiles(t)
	ctx := context.Background()
	q := f.entry(t, "e", "1", touba.StatusParked)
	orig := f.effect(t, q, "charge", touba.RetryReconcile, touba.EffectApplied)
	var statusAtCall string
	f.svc.Compensator = func(ctx context.Context, e *touba.Delivery, _ map[string]touba.StepOutput,
		o *touba.Effect) (*touba.Compensation, error) {
		statusAtCall = f.status(t, q)
		return &touba.Compensation{Scope: q, EffectID: o.EffectID, CompensationID: touba.CompensationID(o.EffectID),
			State: touba.EffectApplied}, nil
	}
	var rep *admin.ReplayReport
	var repErr error
	admin.SetCompensateHook(f.svc, func() {
		rep, repErr = f.svc.ReplayEntries(ctx, admin.ReplayRequest{IDs: []string{q}})
	})
	if _, err := f.svc.Compensate(ctx, admin.CompensateRequest{Scope: q, EffectID: orig}); err != nil {
		t.Fatal(err)
	}
	if repErr != nil || rep == nil || len(rep.Items) != 1 {
		t.Fatalf("replay during the compensation: %+v %v", rep, repErr)
	}
	if it := rep.Items[0]; it.Replayed || !strings.Contains(it.Reason, "compensation") {
		t.Fatalf("replay during the compensation: %+v, want refused naming the compensation", it)
	}
	if statusAtCall != touba.StatusParked || f.status(t, q) != touba.StatusParked {
		t.Fatalf("entry was %s at the handler call and is %s now, want parked throughout", statusAtCall, f.status(t, q))
	}
	// Once the compensation ended, the replay goes through.
	admin.SetCompensateHook(f.svc, nil)
	if rep, err := f.svc.ReplayEntries(ctx, admin.ReplayRequest{IDs: []string{q}}); err != nil || rep.Replayed != 1 {
		t.Fatalf("replay after the compensation: %+v %v", rep, err)
	}
}

// The dispatcher checkpoints only steps without an effect: an external
// write's output stays in the journal. The step outputs an operator sees,
// and those a compensation rebuilds its input from, hold both.
func TestStepOutputsIncludeJournaledResults(t *testing.T) {
	f := mustFiles(t)
	ctx := context.Background()
	q := f.entry(t, "e", "1", touba.StatusParked)
	if err := f.st.SaveStep(q, 0, "look", "run-1", json.RawMessage(`{"seen":1}`)); err != nil {
		t.Fatal(err)
	}
	f.effect(t, q, "charge", touba.RetryReconcile, touba.EffectApplied)
	f.effect(t, q, "notify", touba.RetryReconcile, touba.EffectNotApplied)
	ship := f.effect(t, q, "ship", touba.RetryReconcile, touba.EffectApplied)
	want := map[string]string{"look": `{"seen":1}`, "charge": `{"ok":true}`, "ship": `{"ok":true}`}
	check := func(what string, got map[string]string) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: step outputs %v, want %v", what, got, want)
		}
		for id, w := range want {
			if got[id] != w {
				t.Fatalf("%s: step outputs %v, want %v", what, got, want)
			}
		}
	}
	d, err := f.svc.Entry(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]string{}
	for _, so := range d.Steps {
		shown[so.StepID] = string(so.Output)
	}
	check("queue show", shown)

	var given map[string]string
	f.svc.Compensator = func(ctx context.Context, e *touba.Delivery, steps map[string]touba.StepOutput,
		o *touba.Effect) (*touba.Compensation, error) {
		given = map[string]string{}
		for id, so := range steps {
			given[id] = string(so.Output)
		}
		return &touba.Compensation{Scope: q, EffectID: o.EffectID, CompensationID: touba.CompensationID(o.EffectID),
			State: touba.EffectApplied}, nil
	}
	if _, err := f.svc.Compensate(ctx, admin.CompensateRequest{Scope: q, EffectID: ship}); err != nil {
		t.Fatal(err)
	}
	check("compensation", given)
}
