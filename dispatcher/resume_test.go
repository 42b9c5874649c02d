package dispatcher_test

import (
	"context"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// A resume from a step with new effects gives the step a new effect
// identity (<queue_id>:<step>#1), so the handler is called again; without
// them the step keeps its identity and the journal's applied result
// answers it with no call.
func TestResumeEffectGenerations(t *testing.T) {
	for _, c := range []struct {
		name       string
		newEffects bool
		calls      int
	}{{"new effects", true, 2}, {"same effects", false, 1}} {
		t.Run(c.name, func(t *testing.T) {
			cf := tmp(t, "calls")
			w := newWorld(t, programOf(t, trig(trigName, nil,
				toolStep("bill", toolW, okInput(cf, nil)),
				toolStep("then", toolThen, okInput("", nil)),
			)), processManifest(t, []string{toolW, toolThen}, toolW), nil, true)
			ws := w.mustWaits()
			qid := w.enqueue(trigName, `{}`, nil)
			w.wait(qid, touba.StatusDone)
			ctx := context.Background()
			steps := []string{"bill", "then"}
			if err := w.st.DropSteps(ctx, qid, steps); err != nil {
				t.Fatal(err)
			}
			res, err := ws.Resume(ctx, touba.ResumeRequest{QueueID: qid, Steps: steps, NewEffects: c.newEffects})
			if err != nil {
				t.Fatal(err)
			}
			w.d.Notify()
			w.waitRuns(qid, 2)
			wantEntry(t, w.wait(qid, touba.StatusDone), touba.StatusDone, "", 1)
			cs := calls(t, cf)
			if len(cs) != c.calls {
				t.Fatalf("calls %+v, want %d", cs, c.calls)
			}
			want := touba.EffectIDFor(qid, "bill", res.Gens["bill"])
			if c.newEffects && want != qid+":bill#1" {
				t.Fatalf("resume gens %v, want bill at 1", res.Gens)
			}
			if got := cs[len(cs)-1].EffectID; got != want && c.newEffects {
				t.Fatalf("effect id of the call after the resume %s, want %s", got, want)
			}
			if eff, err := w.j.Get(ctx, qid, want); err != nil || eff == nil || eff.State != touba.EffectApplied {
				t.Fatalf("effect %s: %+v, %v; want applied", want, eff, err)
			}
		})
	}
}
