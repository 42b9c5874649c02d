package admin_test

import (
	"context"
	"encoding/json"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// applied journals an applied effect effectID of scope with result.
func (f *files) applied(tb testing.TB, scope, effectID, result string) {
	tb.Helper()
	ctx := context.Background()
	call := "call-" + effectID
	if _, err := f.j.Prepare(ctx, touba.EffectPrepare{Scope: scope, EffectID: effectID, ToolRef: "tool:t", Operation: touba.OperationInvoke,
		Fingerprint: "sha256:" + effectID, RetryMode: touba.RetryIdempotencyKey, CallID: call}); err != nil {
		tb.Fatal(err)
	}
	if err := f.j.Dispatch(ctx, scope, effectID, call); err != nil {
		tb.Fatal(err)
	}
	if err := f.j.Finish(ctx, touba.EffectOutcome{Scope: scope, EffectID: effectID, CallID: call, State: touba.EffectApplied,
		ReceiptRef: "r", Result: []byte(result)}); err != nil {
		tb.Fatal(err)
	}
}

// TestStepOutputsFollowGenerations: after a resume with new effects the
// output of an external write, as queue show (and the step inputs that
// compensation and the step-input view rebuild) reads it, is that of the
// step's current effect generation, under the step's id: not the first
// generation's, and never under "<step>#<n>".
func TestStepOutputsFollowGenerations(t *testing.T) {
	f := mustFiles(t)
	ctx := admin.WithOperator(context.Background(), "alice")
	id := f.pinned(t, "a", touba.StatusDone)
	f.svc.ProgramTriggers = func() []admin.ProgramTrigger {
		return []admin.ProgramTrigger{{Ref: "trigger:t", Steps: []string{"charge", "paid", "ship"}}}
	}
	f.applied(t, id, id+":ship", `{"gen":0}`)
	if _, err := f.svc.Resume(ctx, admin.ResumeRequest{QueueID: id, From: "ship", NewEffects: true, Reason: "resend"}); err != nil {
		t.Fatal(err)
	}
	got, err := f.q.Lease(ctx, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("lease: %v %+v", err, got)
	}
	f.applied(t, id, id+":ship#1", `{"gen":1}`)
	if err := f.q.Finish(ctx, id, got[0].LeaseToken, touba.StatusDone, "", ""); err != nil {
		t.Fatal(err)
	}
	d, err := f.svc.Entry(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	outs := map[string]string{}
	for _, so := range d.Steps {
		var v any
		_ = json.Unmarshal(so.Output, &v)
		b, _ := json.Marshal(v)
		outs[so.StepID] = string(b)
	}
	if outs["ship"] != `{"gen":1}` {
		t.Errorf("output of ship: %q, want the generation 1 effect's {\"gen\":1}; all: %v", outs["ship"], outs)
	}
	if _, ok := outs["ship#1"]; ok {
		t.Errorf("an effect identity shown as a step: %v", outs)
	}
}
