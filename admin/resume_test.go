package admin_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/dedupe"
)

// definition is trigger:t's definition as the program file has it: a
// tool step, a wait for trigger:b's event, and a tool step after it.
const definition = `{"ref":"trigger:t","source":{"kind":"webhook"},"steps":[` +
	`{"id":"charge","tool":"tool:t","input":{}},` +
	`{"id":"paid","wait_for":{"trigger":"trigger:b","match":{"$ref":"/event/body/id"},"on":"/body/order","timeout_ms":60000,"on_timeout":"continue"}},` +
	`{"id":"ship","tool":"tool:t","input":{}}]}`

const digest = "sha256:0123456789abcdef0123456789abcdef"

// pinned enqueues an entry of trigger:t accepted under definition and
// brings it to status, with checkpoints of every step.
func (f *files) pinned(tb testing.TB, eventID, status string) string {
	tb.Helper()
	ctx := context.Background()
	ws := f.q // the SQLite queue is a touba.WaitStore
	if err := ws.SaveProgram(ctx, digest, []byte(definition)); err != nil {
		tb.Fatal(err)
	}
	body := `{"id":"` + eventID + `"}`
	r, err := f.q.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: eventID, Digest: dedupe.Digest([]byte(body)),
		Body: []byte(body), ProgramDigest: digest})
	if err != nil || !r.Created {
		tb.Fatalf("enqueue %s: %v %+v", eventID, err, r)
	}
	if status == touba.StatusPending {
		return r.QueueID
	}
	got, err := f.q.Lease(ctx, 1)
	if err != nil || len(got) != 1 {
		tb.Fatalf("lease: %v %+v", err, got)
	}
	for _, st := range []string{"charge", "paid", "ship"} {
		if err := f.st.SaveStep(r.QueueID, got[0].LeaseToken, st, "run-1", json.RawMessage(`{"step":"`+st+`"}`)); err != nil {
			tb.Fatal(err)
		}
	}
	if status != touba.StatusRunning {
		code := ""
		if status == touba.StatusFailed {
			code = touba.EHandlerFailed
		}
		if err := f.q.Finish(ctx, r.QueueID, got[0].LeaseToken, status, code, "x"); err != nil {
			tb.Fatal(err)
		}
	}
	return r.QueueID
}

func (f *files) checkpoints(tb testing.TB, queueID string) []string {
	tb.Helper()
	steps, err := f.st.Steps(context.Background(), queueID)
	if err != nil {
		tb.Fatal(err)
	}
	return slices.Sorted(maps.Keys(steps))
}

// TestResumeRefusals: an entry whose run is not over, a step the trigger
// lacks, a trigger the running program lacks are refused with
// EntryNotResumable (409 over the socket), and nothing changes.
func TestResumeRefusals(t *testing.T) {
	f := mustFiles(t)
	ctx := admin.WithOperator(context.Background(), "alice")
	_, c := serve(t, f.svc)
	failed := f.pinned(t, "f", touba.StatusFailed)
	pending := f.pinned(t, "p", touba.StatusPending)
	for _, tc := range []struct {
		name, id, from, want string
		program              []admin.ProgramTrigger
	}{
		{"pending", pending, "charge", "is pending", nil},
		{"unknown step", failed, "shipp", `no step "shipp"`, nil},
		{"not in the running program", failed, "ship", "the running program has no trigger trigger:t",
			[]admin.ProgramTrigger{{Ref: "trigger:other", Steps: []string{"ship"}}}},
		{"not a step of the running trigger", failed, "paid", `no step "paid"`,
			[]admin.ProgramTrigger{{Ref: "trigger:t", Steps: []string{"charge", "ship"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.svc.ProgramTriggers = nil
			if tc.program != nil {
				f.svc.ProgramTriggers = func() []admin.ProgramTrigger { return tc.program }
			}
			_, err := f.svc.Resume(ctx, admin.ResumeRequest{QueueID: tc.id, From: tc.from, Reason: "try"})
			if touba.ErrorCode(err) != touba.EEntryNotResumable || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("resume: %v, want %s naming %q", err, touba.EEntryNotResumable, tc.want)
			}
			if touba.HTTPStatus(touba.ErrorCode(err)) != http.StatusConflict {
				t.Fatalf("status of %s: %d", touba.EEntryNotResumable, touba.HTTPStatus(touba.ErrorCode(err)))
			}
			// The client gets the same code back from the socket.
			if _, err := c.Resume(ctx, admin.ResumeRequest{QueueID: tc.id, From: tc.from}); touba.ErrorCode(err) != touba.EEntryNotResumable {
				t.Fatalf("over the socket: %v", err)
			}
		})
	}
	f.svc.ProgramTriggers = nil
	if got := f.status(t, failed); got != touba.StatusFailed {
		t.Fatalf("refused entry is %s", got)
	}
	if got := f.checkpoints(t, failed); len(got) != 3 {
		t.Fatalf("a refused resume dropped checkpoints: %v", got)
	}
	evs, _ := f.st.OperatorEvents(context.Background(), failed, 100)
	if len(evs) == 0 || evs[0].Action != "queue.resume" || evs[0].Outcome != "refused" {
		t.Fatalf("refusals not audited: %+v", evs)
	}
	if _, err := f.svc.Resume(ctx, admin.ResumeRequest{QueueID: "nope", From: "ship"}); touba.ErrorCode(err) != touba.ENotFound {
		t.Fatalf("unknown entry: %v", err)
	}
	if _, err := f.svc.Resume(ctx, admin.ResumeRequest{QueueID: failed}); touba.ErrorCode(err) != touba.EBadRequest {
		t.Fatalf("no step: %v", err)
	}
}

// TestResumeFromAStep: the steps from STEP on lose their checkpoints, the
// earlier keep theirs; the entry is pending with attempts 0; new effect
// generations only with NewEffects; the dispatcher is woken; the audit
// event names the step, new_effects and the reason.
func TestResumeFromAStep(t *testing.T) {
	f := mustFiles(t)
	ctx := admin.WithOperator(context.Background(), "alice")
	id := f.pinned(t, "a", touba.StatusFailed)
	f.svc.ProgramTriggers = func() []admin.ProgramTrigger {
		return []admin.ProgramTrigger{{Ref: "trigger:t", Steps: []string{"charge", "paid", "ship"}}}
	}
	d, err := f.svc.Entry(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.ResumeSteps, []string{"charge", "paid", "ship"}) || !strings.Contains(strings.Join(d.Next, "\n"), "queue resume "+id) {
		t.Fatalf("queue show: resume steps %v, next %q", d.ResumeSteps, d.Next)
	}
	// A dry run changes nothing and names the identities to come.
	dry, err := f.svc.Resume(ctx, admin.ResumeRequest{QueueID: id, From: "paid", NewEffects: true, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dry.Steps, []string{"paid", "ship"}) || dry.EffectIDs["ship"] != id+":ship#1" || f.status(t, id) != touba.StatusFailed {
		t.Fatalf("dry run: %+v, entry %s", dry, f.status(t, id))
	}

	rep, err := f.svc.Resume(ctx, admin.ResumeRequest{QueueID: id, From: "paid", Reason: "carrier fixed"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Left != touba.StatusFailed || rep.Status != touba.StatusPending || !slices.Equal(rep.Steps, []string{"paid", "ship"}) ||
		rep.EffectIDs["ship"] != id+":ship" || rep.Against != "the running program" {
		t.Fatalf("resume: %+v", rep)
	}
	if got := f.checkpoints(t, id); !slices.Equal(got, []string{"charge"}) {
		t.Fatalf("checkpoints after resume from paid: %v, want only charge's", got)
	}
	e, _ := f.q.Get(ctx, id)
	if e.Status != touba.StatusPending || e.Attempts != 0 || e.ErrorCode != "" {
		t.Fatalf("entry after resume: %s attempts %d code %q", e.Status, e.Attempts, e.ErrorCode)
	}
	if f.wakes.Load() != 1 {
		t.Fatalf("dispatcher woken %d times", f.wakes.Load())
	}
	if gens, err := f.q.EffectGens(ctx, id); err != nil || len(gens) != 0 {
		t.Fatalf("generations without new effects: %v %v", gens, err)
	}
	// Pending again: a second resume is refused until the run ends.
	if _, err := f.svc.Resume(ctx, admin.ResumeRequest{QueueID: id, From: "ship"}); touba.ErrorCode(err) != touba.EEntryNotResumable {
		t.Fatalf("resume of a pending entry: %v", err)
	}
	got, _ := f.q.Lease(ctx, 1)
	if err := f.q.Finish(ctx, id, got[0].LeaseToken, touba.StatusDone, "", ""); err != nil {
		t.Fatal(err)
	}
	rep, err = f.svc.Resume(ctx, admin.ResumeRequest{QueueID: id, From: "ship", NewEffects: true, Reason: "resend the parcel"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Left != touba.StatusDone || rep.EffectIDs["ship"] != id+":ship#1" {
		t.Fatalf("resume with new effects: %+v", rep)
	}
	if gens, _ := f.q.EffectGens(ctx, id); gens["ship"] != 1 || gens["charge"] != 0 || gens["paid"] != 0 {
		t.Fatalf("generations with new effects from ship: %v", gens)
	}
	evs, err := f.st.OperatorEvents(ctx, id, 100)
	if err != nil {
		t.Fatal(err)
	}
	var done []touba.OperatorEvent
	for _, ev := range evs {
		if ev.Action == "queue.resume" && ev.Outcome == "done" {
			done = append(done, ev)
		}
	}
	if len(done) != 2 {
		t.Fatalf("audit: %+v", evs)
	}
	byReason := map[string]touba.OperatorEvent{}
	for _, ev := range done {
		byReason[ev.Reason] = ev
	}
	first, second := byReason["carrier fixed"], byReason["resend the parcel"]
	if first.Operator != "alice" || !strings.Contains(first.Detail, "from paid") || !strings.Contains(first.Detail, "new_effects=false") ||
		!strings.Contains(first.Detail, "failed -> pending") {
		t.Fatalf("audit of the first resume: %+v", first)
	}
	if !strings.Contains(second.Detail, "new_effects=true") || !strings.Contains(second.Detail, id+":ship#1") {
		t.Fatalf("audit of the resume with new effects: %+v", second)
	}
}

// TestResumeOnFilesChecksThePinnedDefinition: with no program loaded (the
// CLI on the files) the step is checked against the definition the entry
// was accepted under; an entry with none stored is refused.
func TestResumeOnFilesChecksThePinnedDefinition(t *testing.T) {
	f := mustFiles(t)
	ctx := context.Background()
	id := f.pinned(t, "a", touba.StatusParked)
	old := f.entry(t, "old", `{}`, touba.StatusFailed) // no program digest
	rep, err := f.svc.Resume(ctx, admin.ResumeRequest{QueueID: id, From: "ship"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Against, "accepted under") || !slices.Equal(rep.Steps, []string{"ship"}) {
		t.Fatalf("resume on files: %+v", rep)
	}
	if _, err := f.svc.Resume(ctx, admin.ResumeRequest{QueueID: old, From: "ship"}); touba.ErrorCode(err) != touba.EEntryNotResumable ||
		!strings.Contains(err.Error(), "not stored") {
		t.Fatalf("resume without a stored definition: %v", err)
	}
}

// TestResumeHonoursTheBusyGuard: while a compensation of the entry runs,
// a resume is refused EntryBusy and drops nothing.
func TestResumeHonoursTheBusyGuard(t *testing.T) {
	f := mustFiles(t)
	ctx := context.Background()
	id := f.pinned(t, "a", touba.StatusFailed)
	eff := f.effect(t, id, "charge", touba.RetryReconcile, touba.EffectApplied)
	f.svc.Compensator = func(ctx context.Context, e *touba.Delivery, _ map[string]touba.StepOutput, orig *touba.Effect) (*touba.Compensation, error) {
		return &touba.Compensation{Scope: orig.Scope, EffectID: orig.EffectID, CompensationID: touba.CompensationID(orig.EffectID),
			ToolRef: orig.ToolRef, State: touba.EffectApplied, ReceiptRef: "undo"}, nil
	}
	var during error
	admin.SetCompensateHook(f.svc, func() {
		_, during = f.svc.Resume(ctx, admin.ResumeRequest{QueueID: id, From: "charge"})
	})
	if _, err := f.svc.Compensate(ctx, admin.CompensateRequest{Scope: id, EffectID: eff}); err != nil {
		t.Fatal(err)
	}
	if touba.ErrorCode(during) != touba.EEntryBusy {
		t.Fatalf("resume during a compensation: %v, want %s", during, touba.EEntryBusy)
	}
	if got := f.checkpoints(t, id); len(got) != 3 || f.status(t, id) != touba.StatusFailed {
		t.Fatalf("busy refusal changed the entry: %v %s", got, f.status(t, id))
	}
}

// TestEntryShowsWaits: a waiting entry shows its wake time, its program
// digest and its open wait with what it awaits (from its definition); once
// a delivery matched it, the waiter's wait names the delivery and the
// delivery's entry says whose wait it matched.
func TestEntryShowsWaits(t *testing.T) {
	f := mustFiles(t)
	ctx := context.Background()
	id := f.pinned(t, "order-1", touba.StatusRunning)
	got, _ := f.q.Get(ctx, id)
	timeout := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	key := touba.WaitKey("trigger:t", "paid")
	if _, err := f.q.BeginWait(ctx, got.LeaseToken, touba.Wait{QueueID: id, StepID: "paid", Kind: touba.WaitEvent, Key: key,
		Value: `"order-1"`, WakeAt: &timeout}); err != nil {
		t.Fatal(err)
	}
	d, err := f.svc.Entry(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if d.Status != touba.StatusWaiting || d.WakeAt == nil || !d.WakeAt.Equal(timeout) || d.ProgramDigest != digest {
		t.Fatalf("waiting entry: status %s wake %v program %q", d.Status, d.WakeAt, d.ProgramDigest)
	}
	if len(d.Waits) != 1 || d.Waits[0].AwaitsTrigger != "trigger:b" || d.Waits[0].AwaitsOn != "/body/order" ||
		d.Waits[0].State != touba.WaitOpen || d.Waits[0].OnTimeout != "continue" {
		t.Fatalf("waits: %+v", d.Waits)
	}
	if !strings.Contains(strings.Join(d.Next, "\n"), "waiting in step paid for a delivery of trigger:b with \"order-1\" at /body/order") {
		t.Fatalf("next of a waiting entry: %q", d.Next)
	}
	if _, err := f.svc.Resume(ctx, admin.ResumeRequest{QueueID: id, From: "paid"}); touba.ErrorCode(err) != touba.EEntryNotResumable {
		t.Fatalf("resume of a waiting entry: %v", err)
	}
	if list, err := f.svc.Entries(ctx, admin.EntryFilter{Status: touba.StatusWaiting}); err != nil || len(list) != 1 || list[0].WakeAt == nil {
		t.Fatalf("waiting listing: %+v %v", list, err)
	}

	body := `{"order":"order-1"}`
	r, err := f.q.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:b", EventID: "pay-1", Digest: dedupe.Digest([]byte(body)),
		Body: []byte(body), Offers: []touba.MatchValue{{Key: key, Value: `"order-1"`}}})
	if err != nil || !slices.Equal(r.Matched, []string{id}) {
		t.Fatalf("matching delivery: %+v %v", r, err)
	}
	d, _ = f.svc.Entry(ctx, id)
	if len(d.Waits) != 1 || d.Waits[0].State != touba.WaitMatched || d.Waits[0].MatchedQueueID != r.QueueID || d.Waits[0].ResolvedAt == nil {
		t.Fatalf("matched wait: %+v", d.Waits)
	}
	pay, err := f.svc.Entry(ctx, r.QueueID)
	if err != nil {
		t.Fatal(err)
	}
	if len(pay.Waits) != 0 || len(pay.MatchedWaits) != 1 || pay.MatchedWaits[0].QueueID != id || pay.MatchedWaits[0].StepID != "paid" {
		t.Fatalf("the matching delivery's entry: waits %+v matched %+v", pay.Waits, pay.MatchedWaits)
	}
}
