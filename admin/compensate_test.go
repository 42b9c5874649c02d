package admin_test

import (
	"context"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/journal"
)

// Resolving a compensation is an operator action like any other: it is in
// the audit trail, and it leaves the entry it undid where it is.
func TestResolveCompensationIsAudited(t *testing.T) {
	f := mustFiles(t)
	ctx := context.Background()
	q := f.entry(t, "e", "1", touba.StatusParked)
	orig := f.effect(t, q, "charge", touba.RetryReconcile, touba.EffectApplied)
	comp, call := journal.CompensationID(orig), "call-comp"
	if _, err := f.j.Prepare(ctx, journal.Prepare{Scope: q, EffectID: comp, ToolRef: "tool:t", Operation: journal.OperationCompensate,
		Fingerprint: "sha256:comp", RetryMode: touba.RetryReconcile, CallID: call}); err != nil {
		t.Fatal(err)
	}
	if err := f.j.Dispatch(ctx, q, comp, call); err != nil {
		t.Fatal(err)
	}
	if err := f.j.Finish(ctx, journal.Outcome{Scope: q, EffectID: comp, CallID: call, State: touba.EffectUnknown}); err != nil {
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
