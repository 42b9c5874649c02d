package console_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/dedupe"
)

// waitDefinition is trigger:w: a charge, a wait for trigger:pay's event
// and a shipment.
const waitDefinition = `{"ref":"trigger:w","source":{"kind":"webhook"},"steps":[` +
	`{"id":"charge","tool":"tool:t","input":{}},` +
	`{"id":"paid","wait_for":{"trigger":"trigger:pay","match":{"$ref":"/event/body/id"},"on":"/body/order","timeout_ms":60000}},` +
	`{"id":"ship","tool":"tool:t","input":{}}]}`

const waitDigest = "sha256:feedfacefeedfacefeedface"

// waiter enqueues an entry of trigger:w under waitDefinition, leases it,
// checkpoints charge and begins its wait in step paid.
func (f *fixture) waiter(tb testing.TB, eventID string) string {
	tb.Helper()
	ctx := context.Background()
	if err := f.q.SaveProgram(ctx, waitDigest, []byte(waitDefinition)); err != nil {
		tb.Fatal(err)
	}
	body := `{"id":"` + eventID + `"}`
	r, err := f.q.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:w", EventID: eventID, Digest: dedupe.Digest([]byte(body)),
		Body: []byte(body), ProgramDigest: waitDigest})
	if err != nil || !r.Created {
		tb.Fatalf("enqueue: %v %+v", err, r)
	}
	got, err := f.q.Lease(ctx, 1)
	if err != nil || len(got) != 1 || got[0].QueueID != r.QueueID {
		tb.Fatalf("lease: %v %+v", err, got)
	}
	if err := f.st.SaveStep(r.QueueID, got[0].LeaseToken, "charge", "run-1", []byte(`{"charged":true}`)); err != nil {
		tb.Fatal(err)
	}
	timeout := time.Now().Add(time.Hour)
	if _, err := f.q.BeginWait(ctx, got[0].LeaseToken, touba.Wait{QueueID: r.QueueID, StepID: "paid", Kind: touba.WaitEvent,
		Key: touba.WaitKey("trigger:w", "paid"), Value: `"` + eventID + `"`, WakeAt: &timeout}); err != nil {
		tb.Fatal(err)
	}
	return r.QueueID
}

// TestEntryPageShowsWaits: a waiting entry's page shows its program, when
// it wakes and its wait with what it awaits, and offers no resume; once a
// delivery matched, the waiter links to it, the delivery's page says whose
// wait it matched, and the listings show waiting with its wake time.
func TestEntryPageShowsWaits(t *testing.T) {
	f := newFixture(t, 50)
	q := f.waiter(t, "order-9")
	b := f.login(t)
	resp, body := b.get("/entries/" + q)
	if resp.StatusCode != 200 {
		t.Fatalf("entry page: %d\n%s", resp.StatusCode, body)
	}
	for _, want := range []string{`id="entry-status" class="st-waiting">waiting`, `id="entry-wake"`, `<code>feedfacefeed</code>`,
		`id="waits"`, "trigger:pay", "<code>/body/order</code>", "&#34;order-9&#34;", "(then fail)", "waiting in step paid"} {
		if !strings.Contains(body, want) {
			t.Fatalf("entry page of a waiting entry lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, `id="resume-form"`) {
		t.Fatal("a waiting entry offers a resume")
	}
	_, body = b.get("/entries?status=waiting")
	if !strings.Contains(body, q) || !strings.Contains(body, "<th>received<br>wakes</th>") {
		t.Fatalf("waiting listing:\n%s", body)
	}
	_, body = b.get("/")
	if !strings.Contains(body, `/entries?status=waiting`) || !strings.Contains(body, `/entries?status=cancelled`) {
		t.Fatalf("overview lacks waiting or cancelled counts:\n%s", body)
	}

	pay := `{"order":"order-9"}`
	r, err := f.q.Enqueue(context.Background(), &touba.Delivery{TriggerRef: "trigger:pay", EventID: "pay-9", Digest: dedupe.Digest([]byte(pay)),
		Body: []byte(pay), Offers: []touba.MatchValue{{Key: touba.WaitKey("trigger:w", "paid"), Value: `"order-9"`}}})
	if err != nil || len(r.Matched) != 1 {
		t.Fatalf("matching delivery: %+v %v", r, err)
	}
	_, body = b.get("/entries/" + q)
	if !strings.Contains(body, `class="st-matched">matched`) || !strings.Contains(body, `<a href="/entries/`+r.QueueID+`">`) {
		t.Fatalf("matched wait:\n%s", body)
	}
	_, body = b.get("/entries/" + r.QueueID)
	if !strings.Contains(body, "This delivery matched the wait <b>paid</b> of <a href=\"/entries/"+q+"\">") {
		t.Fatalf("the matching delivery's page:\n%s", body)
	}
}

// TestResumeThroughTheConsole: the form resumes a failed entry from a step
// at once without new effects; with new effects a confirmation page says
// the writes happen again and names the new identities, and only its
// confirm resumes; a refused resume shows the page again with the choice.
func TestResumeThroughTheConsole(t *testing.T) {
	f := newFixture(t, 50)
	f.svc.ProgramTriggers = func() []admin.ProgramTrigger {
		return []admin.ProgramTrigger{{Ref: "trigger:t", Steps: []string{"charge", "ship"}}}
	}
	q := f.entry(t, "trigger:t", "e1", `{}`, touba.StatusFailed)
	q2 := f.entry(t, "trigger:t", "e2", `{}`, touba.StatusDone)
	b := f.login(t)
	_, body := b.get("/entries/" + q)
	for _, want := range []string{`id="resume-form"`, `action="/entries/` + q + `/resume"`, "<option>charge</option>", "<option>ship</option>",
		`name="new_effects" value="1"`, `name="csrf"`} {
		if !strings.Contains(body, want) {
			t.Fatalf("resume form lacks %q:\n%s", want, body)
		}
	}
	// No CSRF token: refused, nothing changes.
	if resp, _ := b.post("/entries/"+q+"/resume", url.Values{"from": {"ship"}}); resp.StatusCode != 403 || f.status(t, q) != touba.StatusFailed {
		t.Fatalf("resume without CSRF: %d, entry %s", resp.StatusCode, f.status(t, q))
	}
	// A step the trigger lacks: the page again, with the refusal and the
	// reason typed.
	resp, body := b.action("/entries/"+q+"/resume", url.Values{"from": {"shipp"}, "reason": {"typo here"}})
	if resp.StatusCode != 409 || !strings.Contains(body, touba.EEntryNotResumable) || !strings.Contains(body, `value="typo here"`) ||
		!strings.Contains(body, `id="resume-form"`) {
		t.Fatalf("refused resume: %d\n%s", resp.StatusCode, body)
	}

	resp, body = b.action("/entries/"+q+"/resume", url.Values{"from": {"ship"}, "reason": {"carrier back"}})
	if resp.StatusCode != 200 || !strings.Contains(body, "resumed from ship") || !strings.Contains(body, "read back, not repeated") {
		t.Fatalf("resume: %d\n%s", resp.StatusCode, body)
	}
	if got := f.status(t, q); got != touba.StatusPending {
		t.Fatalf("after resume: %s", got)
	}
	ev := f.lastOperator(t, q)
	wantConsoleAudit(t, ev, "queue.resume", "done")
	if ev.Reason != "carrier back" || !strings.Contains(ev.Detail, "new_effects=false") {
		t.Fatalf("audit: %+v", ev)
	}

	// With new effects: first the confirmation page, nothing changed yet.
	_, _ = b.get("/entries/" + q2)
	resp, body = b.action("/entries/"+q2+"/resume", url.Values{"from": {"charge"}, "new_effects": {"1"}, "reason": {"charge again"}})
	if resp.StatusCode != 200 || !strings.Contains(body, `id="confirm-title"`) || !strings.Contains(body, "writes happen again") ||
		!strings.Contains(body, q2+":charge#1") || !strings.Contains(body, q2+":ship#1") {
		t.Fatalf("confirmation page: %d\n%s", resp.StatusCode, body)
	}
	if got := f.status(t, q2); got != touba.StatusDone {
		t.Fatalf("before the confirmation: %s", got)
	}
	for _, hidden := range []string{`name="from" value="charge"`, `name="new_effects" value="1"`, `name="reason" value="charge again"`,
		`name="confirm" value="yes"`, `href="/entries/` + q2 + `" id="cancel"`} {
		if !strings.Contains(body, hidden) {
			t.Fatalf("confirmation page lacks %q:\n%s", hidden, body)
		}
	}
	resp, body = b.action("/entries/"+q2+"/resume", url.Values{"from": {"charge"}, "new_effects": {"1"}, "reason": {"charge again"},
		"confirm": {"yes"}})
	if resp.StatusCode != 200 || !strings.Contains(body, "new effect identities: "+q2+":charge#1, "+q2+":ship#1") {
		t.Fatalf("confirmed resume: %d\n%s", resp.StatusCode, body)
	}
	if gens, _ := f.q.EffectGens(context.Background(), q2); gens["charge"] != 1 || gens["ship"] != 1 {
		t.Fatalf("generations: %v", gens)
	}
	if gens, _ := f.q.EffectGens(context.Background(), q); len(gens) != 0 {
		t.Fatalf("generations of the resume without new effects: %v", gens)
	}
	ev = f.lastOperator(t, q2)
	wantConsoleAudit(t, ev, "queue.resume", "done")
	if !strings.Contains(ev.Detail, "new_effects=true") || ev.Reason != "charge again" {
		t.Fatalf("audit with new effects: %+v", ev)
	}
}

// TestRepinThroughTheConsole: an entry parked ProgramChanged is refused a
// plain replay (the page names repin); with repin a confirmation page
// lists what is kept and what runs again, nothing changed until its
// confirm, which pins it to the running definition.
func TestRepinThroughTheConsole(t *testing.T) {
	f := newFixture(t, 50)
	ctx := context.Background()
	if err := f.q.SaveProgram(ctx, waitDigest, []byte(waitDefinition)); err != nil {
		t.Fatal(err)
	}
	const running = "sha256:0123456789abcdef0123"
	f.svc.ProgramTriggers = func() []admin.ProgramTrigger {
		return []admin.ProgramTrigger{{Ref: "trigger:w", Steps: []string{"charge", "settle"}, Digest: running,
			StepKinds: map[string]string{"charge": "tool:t", "settle": "tool:t"}}}
	}
	body := `{"id":"o-1"}`
	r, err := f.q.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:w", EventID: "o-1", Digest: dedupe.Digest([]byte(body)),
		Body: []byte(body), ProgramDigest: waitDigest})
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.q.Lease(ctx, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("lease: %v %+v", err, got)
	}
	if err := f.st.SaveStep(r.QueueID, got[0].LeaseToken, "charge", "run-1", []byte(`{"charged":true}`)); err != nil {
		t.Fatal(err)
	}
	if err := f.q.Finish(ctx, r.QueueID, got[0].LeaseToken, touba.StatusParked, touba.EProgramChanged, "step paid is gone"); err != nil {
		t.Fatal(err)
	}
	q := r.QueueID
	b := f.login(t)
	_, page := b.get("/entries/" + q)
	if !strings.Contains(page, `id="replay-repin"`) {
		t.Fatalf("entry page lacks the repin box:\n%s", page)
	}
	if _, page = b.action("/entries/"+q+"/replay", url.Values{}); !strings.Contains(page, "--repin") || f.status(t, q) != touba.StatusParked {
		t.Fatalf("plain replay of a ProgramChanged entry: entry %s\n%s", f.status(t, q), page)
	}
	resp, page := b.action("/entries/"+q+"/replay", url.Values{"repin": {"1"}})
	if resp.StatusCode != 200 || !strings.Contains(page, `id="confirm-title"`) || !strings.Contains(page, "Kept (completed, read back, not run again): charge.") ||
		!strings.Contains(page, "Run again: settle.") || f.status(t, q) != touba.StatusParked {
		t.Fatalf("repin confirmation: %d, entry %s\n%s", resp.StatusCode, f.status(t, q), page)
	}
	resp, page = b.action("/entries/"+q+"/replay", url.Values{"repin": {"1"}, "confirm": {"yes"}})
	if resp.StatusCode != 200 || f.status(t, q) != touba.StatusPending {
		t.Fatalf("confirmed repin: %d, entry %s\n%s", resp.StatusCode, f.status(t, q), page)
	}
	if d, err := f.q.Get(ctx, q); err != nil || d.ProgramDigest != running {
		t.Fatalf("pinned to %q (%v), want %s", d.ProgramDigest, err, running)
	}
}
