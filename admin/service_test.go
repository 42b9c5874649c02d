package admin_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/dedupe"
)

// TestReplayEntriesExplainsEveryID replays one id in each state: only the
// failed entry and the parked one without an effect awaiting a verdict go
// back to pending; every other id says why not and what to do instead.
func TestReplayEntriesExplainsEveryID(t *testing.T) {
	f := mustFiles(t)
	ctx := admin.WithOperator(context.Background(), "test")
	failed := f.entry(t, "failed", "1", touba.StatusFailed)
	parkedFree := f.entry(t, "parked-free", "2", touba.StatusParked)
	parkedBlocked := f.entry(t, "parked-blocked", "3", touba.StatusParked)
	effect := f.effect(t, parkedBlocked, "charge", touba.RetryReconcile, touba.EffectUnknown)
	done := f.entry(t, "done", "4", touba.StatusDone)
	// Answered 200 consumed, as intake answers a redelivery by default.
	redelivery := f.logRow(t, &touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: "done", StatusCode: 200,
		ErrorCode: touba.ETriggerReplayRejected, QueueID: done, Digest: dedupe.Digest([]byte("4")), Body: []byte("4"), BodyStored: true})
	// Logged after the redelivery, so newer: a conflict of the same id with
	// another body (and amount) is never what the hint offers to enqueue.
	f.logRow(t, &touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: "done", StatusCode: 409,
		ErrorCode: touba.ETriggerEventPayloadConflict, QueueID: done, Digest: dedupe.Digest([]byte("40")), Body: []byte("40"), BodyStored: true})
	running := f.entry(t, "running", "6", touba.StatusRunning)
	pending := f.entry(t, "pending", "5", touba.StatusPending) // after: entry leases the oldest

	ids := []string{failed, parkedFree, parkedBlocked, done, pending, running, "nope"}
	rep, err := f.svc.ReplayEntries(ctx, admin.ReplayRequest{IDs: ids})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rep.Replayed, 2; got != want {
		t.Fatalf("replayed=%d, want %d: %+v", got, want, rep.Items)
	}
	want := []struct {
		replayed     bool
		reason, hint string
	}{
		{true, "", ""},
		{true, "", ""},
		{false, "outcome is unknown", "effects resolve " + parkedBlocked + " " + effect},
		{false, "entry is done", "deliveries replay " + redelivery + " --new-event-id"},
		{false, "already pending", "queue show"},
		{false, "running", "ends failed or parked"},
		{false, "no such entry", "queue ls"},
	}
	for i, w := range want {
		it := rep.Items[i]
		if it.QueueID != ids[i] || it.Replayed != w.replayed || !strings.Contains(it.Reason, w.reason) || !strings.Contains(it.Hint, w.hint) {
			t.Errorf("item %d: %+v, want replayed=%v reason~%q hint~%q", i, it, w.replayed, w.reason, w.hint)
		}
	}
	for id, st := range map[string]string{failed: touba.StatusPending, parkedFree: touba.StatusPending,
		parkedBlocked: touba.StatusParked, done: touba.StatusDone} {
		if got := f.status(t, id); got != st {
			t.Errorf("%s is %s, want %s", id, got, st)
		}
	}
	if got := f.wakes.Load(); got != 1 {
		t.Errorf("wakes=%d, want 1", got)
	}
	// Every id, done or refused, is in the audit trail.
	if ev := f.operatorEvents(t, failed); len(ev) != 1 || ev[0].Outcome != "done" || ev[0].Operator != "test" {
		t.Errorf("audit of the failed entry: %+v", ev)
	}
	if ev := f.operatorEvents(t, done); len(ev) != 1 || ev[0].Outcome != "refused" {
		t.Errorf("audit of the done entry: %+v", ev)
	}
}

func TestReplayEntriesByStatus(t *testing.T) {
	f := mustFiles(t)
	ctx := context.Background()
	a := f.entry(t, "a", "1", touba.StatusFailed)
	b := f.entry(t, "b", "2", touba.StatusFailed)
	f.entry(t, "c", "3", touba.StatusDone)
	rep, err := f.svc.ReplayEntries(ctx, admin.ReplayRequest{Status: touba.StatusFailed, TriggerRef: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Replayed != 2 || rep.Items[0].QueueID != a || rep.Items[1].QueueID != b {
		t.Fatalf("replay --status failed: %+v", rep)
	}
	// Nothing left: the report says so rather than nothing at all.
	rep, err = f.svc.ReplayEntries(ctx, admin.ReplayRequest{Status: touba.StatusFailed})
	if err != nil || rep.Replayed != 0 || rep.Note != "no failed entries" {
		t.Fatalf("second replay: %v %+v", err, rep)
	}
	for _, bad := range []admin.ReplayRequest{{}, {Status: "done"}, {IDs: []string{a}, Status: "failed"}} {
		if _, err := f.svc.ReplayEntries(ctx, bad); touba.ErrorCode(err) != touba.EBadRequest {
			t.Errorf("replay %+v: %v, want %s", bad, err, touba.EBadRequest)
		}
	}
}

func TestResolveReleasesParkedEntry(t *testing.T) {
	for _, c := range []struct {
		name       string
		req        func(scope, id string) admin.ResolveRequest
		wantResult string
	}{
		{"applied default result", func(s, id string) admin.ResolveRequest {
			return admin.ResolveRequest{Scope: s, EffectID: id, State: touba.EffectApplied, ReceiptRef: "order:42"}
		}, `{"receipt_ref":"order:42"}`},
		{"applied with result", func(s, id string) admin.ResolveRequest {
			return admin.ResolveRequest{Scope: s, EffectID: id, State: touba.EffectApplied, ReceiptRef: "order:42",
				Result: json.RawMessage(`{"id": 42}`)}
		}, `{"id": 42}`},
		{"not applied", func(s, id string) admin.ResolveRequest {
			return admin.ResolveRequest{Scope: s, EffectID: id, State: touba.EffectNotApplied}
		}, ``},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := mustFiles(t)
			ctx := context.Background()
			q := f.entry(t, "e", "1", touba.StatusParked)
			id := f.effect(t, q, "charge", touba.RetryReconcile, touba.EffectUnknown)
			req := c.req(q, id)
			res, err := f.svc.Resolve(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Replayed || res.EntryStatus != touba.StatusPending || f.status(t, q) != touba.StatusPending {
				t.Fatalf("entry after resolve: %+v (%s)", res, f.status(t, q))
			}
			if res.Effect.State != req.State || string(res.Effect.Result) != c.wantResult {
				t.Fatalf("effect after resolve: %s %s, want %s %s", res.Effect.State, res.Effect.Result, req.State, c.wantResult)
			}
			if f.wakes.Load() != 1 {
				t.Fatalf("wakes=%d, want 1", f.wakes.Load())
			}
			// A second verdict is refused: the effect is not unknown any more.
			if _, err := f.svc.Resolve(ctx, req); touba.ErrorCode(err) != touba.EEffectNotUnknown {
				t.Fatalf("second resolve: %v, want %s", err, touba.EEffectNotUnknown)
			}
			ev := f.operatorEvents(t, q)
			if len(ev) != 2 || ev[0].Outcome != "done" || ev[1].Outcome != "refused" || ev[0].Action != "effects.resolve" {
				t.Fatalf("audit: %+v", ev)
			}
			events, _ := f.j.Events(ctx, q, id)
			if last := events[len(events)-1]; !strings.Contains(last.Detail, "operator resolve") {
				t.Fatalf("journal audit event: %+v", last)
			}
		})
	}
}

func TestResolveKeepsEntryParkedOnAnotherUnknown(t *testing.T) {
	f := mustFiles(t)
	q := f.entry(t, "e", "1", touba.StatusParked)
	a := f.effect(t, q, "a", touba.RetryReconcile, touba.EffectUnknown)
	b := f.effect(t, q, "b", touba.RetryNone, touba.EffectUnknown)
	res, err := f.svc.Resolve(context.Background(), admin.ResolveRequest{Scope: q, EffectID: a, State: touba.EffectNotApplied})
	if err != nil {
		t.Fatal(err)
	}
	if res.Replayed || f.status(t, q) != touba.StatusParked || !strings.Contains(res.Note, b) {
		t.Fatalf("resolve with another unknown effect: %+v", res)
	}
}

func TestResolveRefusals(t *testing.T) {
	f := mustFiles(t)
	ctx := context.Background()
	q := f.entry(t, "e", "1", touba.StatusParked)
	applied := f.effect(t, q, "a", touba.RetryReconcile, touba.EffectApplied)
	for _, c := range []struct {
		req  admin.ResolveRequest
		code string
	}{
		{admin.ResolveRequest{Scope: q, EffectID: applied, State: touba.EffectNotApplied}, touba.EEffectNotUnknown},
		{admin.ResolveRequest{Scope: q, EffectID: "missing", State: touba.EffectNotApplied}, touba.ENotFound},
		{admin.ResolveRequest{Scope: q, EffectID: applied, State: touba.EffectApplied}, touba.EBadRequest},
		{admin.ResolveRequest{Scope: q, EffectID: applied, State: touba.EffectApplied, ReceiptRef: "r", Result: json.RawMessage(`{`)}, touba.EBadRequest},
		{admin.ResolveRequest{Scope: q, EffectID: applied, State: "cancelled"}, touba.EBadRequest},
	} {
		if _, err := f.svc.Resolve(ctx, c.req); touba.ErrorCode(err) != c.code {
			t.Errorf("resolve %+v: %v, want %s", c.req, err, c.code)
		}
	}
	if e, _ := f.j.Get(ctx, q, applied); e.State != touba.EffectApplied || e.ReceiptRef != "r-a" {
		t.Fatalf("an applied effect was rewritten: %+v", e)
	}
}

func TestReplayDelivery(t *testing.T) {
	f := mustFiles(t)
	ctx := context.Background()
	done := f.entry(t, "evt-done", `{"n":1}`, touba.StatusDone)
	// A redelivery answered 200 consumed is replayable as its 409 form is.
	rejected := f.logRow(t, &touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: "evt-done", StatusCode: 200,
		ErrorCode: touba.ETriggerReplayRejected, QueueID: done, Body: []byte(`{"n":1}`), BodyStored: true,
		Headers: map[string]string{"content-type": "application/json"}})
	conflict := f.logRow(t, &touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: "evt-done", StatusCode: 409,
		ErrorCode: touba.ETriggerEventPayloadConflict, QueueID: done, Body: []byte(`{"n":2}`), BodyStored: true})
	unavailable := f.logRow(t, &touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: "evt-new", StatusCode: 503,
		ErrorCode: touba.ETriggerUnavailable, Body: []byte(`{"n":3}`), BodyStored: true})
	badSig := f.logRow(t, &touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: "evt-x", StatusCode: 401,
		ErrorCode: touba.ETriggerSignatureInvalid})
	dup := f.logRow(t, &touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: "evt-done", StatusCode: 202, QueueID: done})

	// The same identity again: intake's answers, nothing enqueued.
	r, err := f.svc.ReplayDelivery(ctx, admin.DeliveryReplayRequest{DeliveryID: rejected})
	if err != nil || r.Code != touba.ETriggerReplayRejected || r.QueueID != done || !strings.Contains(r.Hint, "--new-event-id") {
		t.Fatalf("replay of a consumed event: %v %+v", err, r)
	}
	r, err = f.svc.ReplayDelivery(ctx, admin.DeliveryReplayRequest{DeliveryID: conflict})
	if err != nil || r.Code != touba.ETriggerEventPayloadConflict || r.QueueID != done {
		t.Fatalf("replay of a conflicting body: %v %+v", err, r)
	}
	// A fresh identity makes a new entry with the stored body and headers.
	r, err = f.svc.ReplayDelivery(ctx, admin.DeliveryReplayRequest{DeliveryID: rejected, NewEventID: true})
	if err != nil || !r.Enqueued() || !strings.HasPrefix(r.EventID, "replay-") || r.QueueID == done {
		t.Fatalf("replay with a new event id: %v %+v", err, r)
	}
	e, _ := f.q.Get(ctx, r.QueueID)
	if string(e.Body) != `{"n":1}` || e.TriggerRef != "trigger:t" || e.Headers["content-type"] != "application/json" {
		t.Fatalf("replayed entry: %+v", e)
	}
	// A delivery refused before it got an entry enqueues under its own id,
	// once; the second time it is a duplicate of that entry.
	r1, err := f.svc.ReplayDelivery(ctx, admin.DeliveryReplayRequest{DeliveryID: unavailable})
	if err != nil || !r1.Enqueued() || r1.EventID != "evt-new" {
		t.Fatalf("replay of a 503: %v %+v", err, r1)
	}
	r2, err := f.svc.ReplayDelivery(ctx, admin.DeliveryReplayRequest{DeliveryID: unavailable})
	if err != nil || r2.Status != touba.IntakeDuplicate || r2.QueueID != r1.QueueID {
		t.Fatalf("second replay of a 503: %v %+v", err, r2)
	}
	if got := f.wakes.Load(); got != 2 {
		t.Fatalf("wakes=%d, want 2 (one per new entry)", got)
	}
	// Rows without a body, or that were accepted, say why not.
	for id, why := range map[string]string{badSig: "failed signature verification", dup: "nothing to replay"} {
		_, err := f.svc.ReplayDelivery(ctx, admin.DeliveryReplayRequest{DeliveryID: id})
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("replay of %s: %v, want %q", id, err, why)
		}
	}
	if _, err := f.svc.ReplayDelivery(ctx, admin.DeliveryReplayRequest{DeliveryID: "nope"}); touba.ErrorCode(err) != touba.ENotFound {
		t.Fatalf("replay of a missing delivery: %v", err)
	}
	// A trigger the running program lacks is refused.
	f.svc.HasTrigger = func(string) bool { return false }
	if _, err := f.svc.ReplayDelivery(ctx, admin.DeliveryReplayRequest{DeliveryID: rejected, NewEventID: true}); touba.ErrorCode(err) != touba.ETriggerNotFound {
		t.Fatalf("replay for a missing trigger: %v", err)
	}
	if got := f.operatorEvents(t, ""); len(got) < 7 {
		t.Fatalf("audit rows=%d, want one per replay asked", len(got))
	}
}

func TestEntryShowsItsStory(t *testing.T) {
	f := mustFiles(t)
	ctx := context.Background()
	q := f.entry(t, "e", `{"n":1}`, touba.StatusParked)
	id := f.effect(t, q, "charge", touba.RetryReconcile, touba.EffectUnknown)
	f.logRow(t, &touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: "e", StatusCode: 202, QueueID: q})
	d, err := f.svc.Entry(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if d.Status != touba.StatusParked || d.ErrorMessage != "outcome unknown" || d.Body == nil || d.Body.Text != `{"n":1}` {
		t.Fatalf("entry: %+v", d)
	}
	if len(d.Effects) != 1 || d.Effects[0].EffectID != id || len(d.Effects[0].Events) != 3 {
		t.Fatalf("effects: %+v", d.Effects)
	}
	if len(d.Deliveries) != 1 || len(d.Next) != 1 || !strings.Contains(d.Next[0], "effects resolve "+q+" "+id) {
		t.Fatalf("deliveries %+v next %v", d.Deliveries, d.Next)
	}
	if _, err := f.svc.Entry(ctx, "nope"); touba.ErrorCode(err) != touba.ENotFound {
		t.Fatalf("show of a missing entry: %v", err)
	}
}
