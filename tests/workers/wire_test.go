package workers_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// answerDoc is a §4 response to call with an applied receipt.
func answerDoc(call map[string]any) string {
	ctx := call["context"].(map[string]any)
	eff := ctx["effect"].(map[string]any)
	return fmt.Sprintf(`{"call_id": %q, "ok": true, "output": {"by": "raw"},
		"effect_receipt": {"effect_id": %q, "fingerprint": %q, "outcome": "applied", "receipt_ref": "raw:1"}}`,
		ctx["call_id"], eff["effect_id"], eff["fingerprint"])
}

// TestWireRefusals: a wrong or missing token is 401 WorkerUnauthorized,
// then throttled; a tool the token does not serve is 403 WorkerForbidden;
// an answer twice, or to a call that timed out, is 409 WorkerCallNotHeld
// and not used: the timed-out call ends unknown, is handed out again with
// the same effect id (idempotency_key), and only that answer counts.
func TestWireRefusals(t *testing.T) { eachBackend(t, tWireRefusals) }

func tWireRefusals(t *testing.T, backend string) {
	w := newWorld(t, backend, touba.RetryIdempotencyKey, 1500)
	d := w.start("--workers", "4")
	takeURL := d.URL() + "/workers/v1/take"
	body := fmt.Sprintf(`{"tools": [%q], "max": 1, "wait_ms": 0}`, postTool)
	for name, tok := range map[string]string{"missing": "", "wrong": "nope"} {
		if status, b := post(t, takeURL, tok, body); status != http.StatusUnauthorized || !strings.Contains(b, touba.EWorkerUnauthorized) {
			t.Errorf("%s token: %d %s", name, status, b)
		}
	}
	if status, b := post(t, takeURL, token+"-other", body); status != http.StatusForbidden || !strings.Contains(b, touba.EWorkerForbidden) {
		t.Errorf("the other binding's token for %s: %d %s", postTool, status, b)
	}
	if status, b := post(t, takeURL, token, fmt.Sprintf(`{"tools": [%q, %q]}`, postTool, otherTool)); status != http.StatusForbidden ||
		!strings.Contains(b, otherTool) {
		t.Errorf("a tool the token does not serve: %d %s", status, b)
	}
	if status, b := post(t, takeURL, token, fmt.Sprintf(`{"tools": [%q], "wait_ms": 60001}`, postTool)); status != http.StatusBadRequest {
		t.Errorf("wait_ms over 60000: %d %s", status, b)
	}
	// More wrong tokens from this address: throttled like the console.
	throttled := false
	for range 6 {
		if status, _ := post(t, takeURL, "guess", body); status == http.StatusTooManyRequests {
			throttled = true
			break
		}
	}
	if !throttled {
		t.Errorf("wrong tokens were never throttled")
	}
	if strings.Contains(d.Log(), token) {
		t.Errorf("the daemon's log holds the token")
	}
	// The throttle blocks this address for a while; a restart starts
	// with an empty table.
	w.stop()
	d = w.start("--workers", "4")

	w.send(orders, "evt-1")
	var calls []map[string]any
	testkit.WaitFor(t, 20*time.Second, func() bool {
		calls = take(t, d, token, postTool, 5, 2000)
		return len(calls) > 0
	}, "a call to take")
	if len(calls) != 1 {
		t.Fatalf("took %d calls, want 1", len(calls))
	}
	first := calls[0]
	effectID := first["context"].(map[string]any)["effect"].(map[string]any)["effect_id"].(string)
	// No answer within timeout_ms: the call ends unknown and is handed out
	// again under the same effect id.
	var again []map[string]any
	testkit.WaitFor(t, 30*time.Second, func() bool {
		again = take(t, d, token, postTool, 5, 2000)
		return len(again) > 0
	}, "the call to be handed out again")
	second := again[0]
	if got := second["context"].(map[string]any)["effect"].(map[string]any)["effect_id"]; got != effectID {
		t.Fatalf("handed out again as %v, want effect %s", got, effectID)
	}
	if second["context"].(map[string]any)["call_id"] == first["context"].(map[string]any)["call_id"] {
		t.Fatalf("the same call id twice")
	}
	answerURL := d.URL() + "/workers/v1/answer"
	if status, b := post(t, answerURL, token, answerDoc(first)); status != http.StatusConflict || !strings.Contains(b, touba.EWorkerCallNotHeld) {
		t.Fatalf("answer to the timed-out call: %d %s", status, b)
	}
	if status, b := post(t, answerURL, token+"-other", answerDoc(second)); status != http.StatusConflict {
		t.Fatalf("answer with another binding's token: %d %s", status, b)
	}
	if status, b := post(t, answerURL, token, answerDoc(second)); status != http.StatusOK || !strings.Contains(b, "recorded") {
		t.Fatalf("answer: %d %s", status, b)
	}
	if status, b := post(t, answerURL, token, answerDoc(second)); status != http.StatusConflict {
		t.Fatalf("second answer: %d %s", status, b)
	}
	w.waitStatus(touba.StatusDone, orders, 1, 20*time.Second)
	w.stop()
	effects, events := w.effects()
	if len(effects) != 1 || effects[0].State != touba.EffectApplied || effects[0].CallID != second["context"].(map[string]any)["call_id"] {
		t.Fatalf("effects %+v", effects)
	}
	var states []string
	for _, ev := range events[effectID] {
		states = append(states, ev.State)
	}
	if want := []string{"prepared", "dispatched", "unknown", "prepared", "dispatched", "applied"}; !slices.Equal(states, want) {
		raw, _ := json.Marshal(events[effectID])
		t.Fatalf("journal events %v, want %v\n%s", states, want, raw)
	}
}
