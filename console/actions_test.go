package console_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// lastOperator is the newest audit row of an entry.
func (f *fixture) lastOperator(t *testing.T, queueID string) touba.OperatorEvent {
	t.Helper()
	ev, err := f.st.OperatorEvents(context.Background(), queueID, 0)
	if err != nil || len(ev) == 0 {
		t.Fatalf("operator events of %s: %v, %v", queueID, ev, err)
	}
	return ev[len(ev)-1]
}

func wantConsoleAudit(t *testing.T, ev touba.OperatorEvent, action, outcome string) {
	t.Helper()
	if ev.Action != action || ev.Outcome != outcome || !strings.HasPrefix(ev.Operator, "console: session from 127.0.0.1:") {
		t.Fatalf("audit %+v, want %s %s by the console", ev, action, outcome)
	}
}

// TestResolveApplied: the verdict stores the receipt and the result JSON,
// puts the parked entry back to pending and is audited as the console's;
// invalid JSON is refused before anything is stored; a second verdict is
// refused EffectNotUnknown.
func TestResolveApplied(t *testing.T) {
	f := newFixture(t, 50)
	q := f.entry(t, "trigger:t", "e1", `{}`, touba.StatusParked)
	eff := f.effect(t, q, "charge", "tool:t", touba.RetryReconcile, touba.EffectUnknown)
	b := f.login(t)
	path := "/effects/" + q + "/" + eff + "/resolve"
	resp, body := b.action(path, url.Values{"verdict": {"applied"}, "receipt_ref": {"ch_1"}, "result": {`{"charge": "ch_1",`}})
	if resp.StatusCode != 400 || !strings.Contains(body, touba.EBadRequest+": the result is not valid JSON") {
		t.Fatalf("invalid result JSON: %d %s", resp.StatusCode, body)
	}
	// The refused form keeps what the operator typed.
	if !strings.Contains(body, `value="ch_1"`) || !strings.Contains(body, `>{&#34;charge&#34;: &#34;ch_1&#34;,</textarea>`) {
		t.Fatalf("the refused form lost what was typed:\n%s", body)
	}
	if got := f.effectState(t, q, eff); got != touba.EffectUnknown {
		t.Fatalf("after invalid JSON: %s, want unknown", got)
	}
	resp, body = b.action(path, url.Values{"verdict": {"applied"}, "receipt_ref": {"ch_1"}, "result": {`{"charge": "ch_1"}`}})
	if resp.StatusCode != 200 || strings.Count(body, "pending again") != 1 {
		t.Fatalf("resolve applied: %d, want 200 saying once that the entry is pending again:\n%s", resp.StatusCode, body)
	}
	e, _ := f.j.Get(context.Background(), q, eff)
	if e.State != touba.EffectApplied || e.ReceiptRef != "ch_1" || string(e.Result) != `{"charge": "ch_1"}` {
		t.Fatalf("journal: %+v", e)
	}
	if got := f.status(t, q); got != touba.StatusPending {
		t.Fatalf("entry %s, want pending", got)
	}
	wantConsoleAudit(t, f.lastOperator(t, q), "effects.resolve", "done")
	resp, body = b.action(path, url.Values{"verdict": {"not_applied"}})
	if resp.StatusCode != 409 || !strings.Contains(body, touba.EEffectNotUnknown+":") {
		t.Fatalf("second verdict: %d %s", resp.StatusCode, body)
	}
	wantConsoleAudit(t, f.lastOperator(t, q), "effects.resolve", "refused")
}

// TestResolveNotApplied releases the identity and the entry.
func TestResolveNotApplied(t *testing.T) {
	f := newFixture(t, 50)
	q := f.entry(t, "trigger:t", "e1", `{}`, touba.StatusParked)
	eff := f.effect(t, q, "charge", "tool:t", touba.RetryNone, touba.EffectUnknown)
	b := f.login(t)
	// First a page that says the write may happen twice; nothing changes.
	resp, body := b.action("/effects/"+q+"/"+eff+"/resolve", url.Values{"verdict": {"not_applied"}})
	if resp.StatusCode != 200 || !strings.Contains(body, `id="confirm"`) || !strings.Contains(body, "happen twice") ||
		f.effectState(t, q, eff) != touba.EffectUnknown || f.status(t, q) != touba.StatusParked {
		t.Fatalf("not applied, unconfirmed: %d, effect %s, entry %s\n%s", resp.StatusCode, f.effectState(t, q, eff), f.status(t, q), body)
	}
	resp, _ = b.action("/effects/"+q+"/"+eff+"/resolve", url.Values{"verdict": {"not_applied"}, "confirm": {"yes"}})
	if resp.StatusCode != 200 || f.effectState(t, q, eff) != touba.EffectNotApplied || f.status(t, q) != touba.StatusPending {
		t.Fatalf("not applied: %d, effect %s, entry %s", resp.StatusCode, f.effectState(t, q, eff), f.status(t, q))
	}
	if resp, _ := b.action("/effects/"+q+"/"+eff+"/resolve", url.Values{"verdict": {"maybe"}}); resp.StatusCode != 400 {
		t.Fatalf("verdict maybe: %d, want 400", resp.StatusCode)
	}
}

// TestReplayEntry: a failed entry goes back to pending; a pending one is
// refused NothingReplayed with the reason.
func TestReplayEntry(t *testing.T) {
	f := newFixture(t, 50)
	q := f.entry(t, "trigger:t", "e1", `{}`, touba.StatusFailed)
	b := f.login(t)
	resp, body := b.action("/entries/"+q+"/replay", nil)
	if resp.StatusCode != 200 || f.status(t, q) != touba.StatusPending || !strings.Contains(body, "left failed") {
		t.Fatalf("replay: %d, %s\n%s", resp.StatusCode, f.status(t, q), body)
	}
	wantConsoleAudit(t, f.lastOperator(t, q), "queue.replay", "done")
	resp, body = b.action("/entries/"+q+"/replay", nil)
	if resp.StatusCode != 422 || !strings.Contains(body, touba.ENothingReplayed+":") {
		t.Fatalf("replay of a pending entry: %d %s", resp.StatusCode, body)
	}
}

// TestReplayDelivery: a stored rejected delivery is enqueued; replaying
// it again under its event id is refused like intake; with a new event id
// it is a new entry.
func TestReplayDelivery(t *testing.T) {
	f := newFixture(t, 50)
	d := f.logRow(t, &touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: "late-1", StatusCode: 503,
		ErrorCode: touba.ETriggerUnavailable, Body: []byte(`{"x":1}`), BodyStored: true, Digest: "d"})
	b := f.login(t)
	resp, body := b.action("/deliveries/"+d+"/replay", nil)
	if resp.StatusCode != 200 || !strings.Contains(body, "replayed: enqueued") {
		t.Fatalf("replay: %d %s", resp.StatusCode, body)
	}
	list, _ := f.q.List(context.Background(), touba.EntryFilter{})
	if len(list) != 1 || list[0].EventID != "late-1" || string(list[0].Body) != `{"x":1}` {
		t.Fatalf("entries after replay: %+v", list)
	}
	wantConsoleAudit(t, f.lastOperator(t, list[0].QueueID), "deliveries.replay", "done")
	resp, body = b.action("/deliveries/"+d+"/replay", nil)
	// The entry it made is still pending: intake's answer is duplicate.
	if resp.StatusCode != 200 || !strings.Contains(body, "replayed: duplicate") {
		t.Fatalf("second replay: %d %s", resp.StatusCode, body)
	}
	resp, body = b.action("/deliveries/"+d+"/replay", url.Values{"new_event_id": {"1"}})
	if resp.StatusCode != 200 || !strings.Contains(body, "event id: replay-") {
		t.Fatalf("replay with a new event id: %d %s", resp.StatusCode, body)
	}
	if list, _ := f.q.List(context.Background(), touba.EntryFilter{}); len(list) != 2 {
		t.Fatalf("entries: %d, want 2", len(list))
	}
	// A row with no stored body is refused with the CLI's code.
	sig := f.logRow(t, &touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: "s", StatusCode: 401, ErrorCode: touba.ETriggerSignatureInvalid})
	if resp, body := b.action("/deliveries/"+sig+"/replay", nil); resp.StatusCode != 422 || !strings.Contains(body, touba.EDeliveryNotReplayable+":") {
		t.Fatalf("unreplayable: %d %s", resp.StatusCode, body)
	}
}

// TestCompensate calls the service's compensation for an applied effect
// of a binding that supports it, and refuses an unknown one.
func TestCompensate(t *testing.T) {
	f := newFixture(t, 50)
	q := f.entry(t, "trigger:t", "e1", `{}`, touba.StatusDone)
	eff := f.effect(t, q, "ship", "tool:undoable", touba.RetryIdempotencyKey, touba.EffectApplied)
	b := f.login(t)
	resp, body := b.action("/effects/"+q+"/"+eff+"/compensate", nil)
	if resp.StatusCode != 200 || !strings.Contains(body, "Compensation "+eff+":compensate: applied") {
		t.Fatalf("compensate: %d %s", resp.StatusCode, body)
	}
	if got := f.compensated(); len(got) != 1 || got[0] != eff {
		t.Fatalf("compensator called for %v", got)
	}
	wantConsoleAudit(t, f.lastOperator(t, q), "effects.compensate", "done")
	if resp, body := b.action("/effects/"+q+"/no-such/compensate", nil); resp.StatusCode != 404 || !strings.Contains(body, touba.ENotFound) {
		t.Fatalf("compensate an unknown effect: %d", resp.StatusCode)
	}
}
