package console_test

import (
	"context"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// TestPagesSayOnlyWhatIsTrue covers the rough edges a new operator met
// (issue 24): each assertion is a sentence or link that was wrong.
func TestPagesSayOnlyWhatIsTrue(t *testing.T) {
	f := newFixture(t, 50)
	ctx := context.Background()
	q := f.entry(t, "trigger:pay/Refund", "evt-1", `{"amount": 12}`, touba.StatusParked)
	// An unknown effect whose last event says why the call failed.
	id, call := q+":charge", "call-charge"
	if _, err := f.j.Prepare(ctx, touba.EffectPrepare{Scope: q, EffectID: id, ToolRef: "tool:pay/Charge",
		Operation: touba.OperationInvoke, Fingerprint: "sha256:x", RetryMode: touba.RetryNone, CallID: call}); err != nil {
		t.Fatal(err)
	}
	if err := f.j.Dispatch(ctx, q, id, call); err != nil {
		t.Fatal(err)
	}
	if err := f.j.Finish(ctx, touba.EffectOutcome{Scope: q, EffectID: id, CallID: call, State: touba.EffectUnknown,
		ErrorCode: touba.EHandlerFailed, Detail: "exit status 3: ledger refused the connection"}); err != nil {
		t.Fatal(err)
	}
	// An external write's output is read from the journal: it has no run.
	f.effect(t, q, "ship", "tool:t", touba.RetryIdempotencyKey, touba.EffectApplied)

	// Before login: no navigation to pages that only answer 401.
	if _, body := plain(t, "GET", f.srv.URL+"/login", nil); strings.Contains(body, "<nav>") {
		t.Errorf("the login page shows the navigation:\n%s", body)
	}
	b := f.login(t)

	// The overview's two cards lead to two different lists.
	_, body := b.get("/")
	if !strings.Contains(body, `href="/parked#parked-entries"`) || !strings.Contains(body, `href="/parked#unknown-effects"`) {
		t.Errorf("overview cards:\n%s", body)
	}

	// The effect page: the reason with the code, no replay while unknown,
	// the journal's sequence explained, and the input not mislabelled.
	_, body = b.get("/effects/" + q + "/" + id)
	if !strings.Contains(body, `id="last-error">HandlerFailed: exit status 3: ledger refused the connection</dd>`) {
		t.Errorf("last error without its reason:\n%s", body)
	}
	if strings.Contains(body, "Replay the entry") {
		t.Errorf("replay offered while the effect is unknown (it would park again):\n%s", body)
	}
	if strings.Contains(body, "The request it was sent") || !strings.Contains(body, "shared by every effect") {
		t.Errorf("effect page labels:\n%s", body)
	}
	// No program is loaded in this fixture: the input cannot be rebuilt,
	// and the page says why instead of calling the body the request.
	if !strings.Contains(body, `id="step-input-why"`) || !strings.Contains(body, "CompensationInputUnavailable") {
		t.Errorf("step input section:\n%s", body)
	}

	// A GET that fails changed nothing by definition: no such sentence.
	resp, body := b.get("/entries/no-such-entry")
	if resp.StatusCode != 404 || strings.Contains(body, "Nothing else was changed") {
		t.Errorf("GET error page: %d\n%s", resp.StatusCode, body)
	}
	// A refused action does say it.
	pending := f.entry(t, "trigger:t", "evt-2", `{}`, touba.StatusPending)
	resp, body = b.action("/entries/"+pending+"/replay", nil)
	if resp.StatusCode != 422 || !strings.Contains(body, "Nothing else was changed") {
		t.Errorf("refused action page: %d\n%s", resp.StatusCode, body)
	}

	// The entry page: no "(run )" for an output without a run.
	_, body = b.get("/entries/" + q)
	if strings.Contains(body, "(run <code></code>)") {
		t.Errorf("a step shows an empty run id:\n%s", body)
	}
}
