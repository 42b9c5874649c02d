package dispatcher_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// webhookManifest binds toolW to an outbound webhook at url, signed with
// the secret of env HOOK_KEY, under retry mode mode.
func webhookManifest(tb testing.TB, url, mode string) string {
	tb.Helper()
	return mustJSON(tb, map[string]any{"manifest_version": "touba-manifest-v1", "bindings": map[string]any{
		toolW: map[string]any{
			"handler": map[string]any{"kind": "webhook", "options": map[string]any{"url": url, "timeout_sec": 5},
				"credentials": map[string]any{"hmac_secret": map[string]string{"env": "HOOK_KEY"}}},
			"effect_contract": map[string]any{"kind": "external_write", "retry_mode": mode},
		},
	}})
}

// A remote that applies the write and then answers 502 receives it exactly
// once under reconcile and none, through the real webhook runner: the call
// ends as unknown and the entry is parked (SPEC §5), also after an
// operator's replay without resolving. Under idempotency_key the same 502
// is retried inside the call and the run completes.
func TestWebhookServerErrorAfterApplying(t *testing.T) {
	for _, c := range []struct {
		mode, status, code string
		received           int32
	}{
		{touba.RetryReconcile, touba.StatusParked, touba.EEffectReconciliationRequired, 1},
		{touba.RetryNone, touba.StatusParked, touba.EEffectOutcomeUnknown, 1},
		{touba.RetryIdempotencyKey, touba.StatusDone, "", 2},
	} {
		t.Run(c.mode, func(t *testing.T) {
			var received atomic.Int32
			remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if received.Add(1) == 1 {
					w.WriteHeader(http.StatusBadGateway) // applied, then failed to answer
					return
				}
				io.WriteString(w, `{"id":1}`)
			}))
			t.Cleanup(remote.Close)
			in := map[string]any{"data": 1}
			w := newWorld(t, program(t, 3, step{"bill", toolW, in}), webhookManifest(t, remote.URL, c.mode),
				map[string]string{"HOOK_KEY": "k-" + c.mode}, true)
			qid := w.enqueue(trigName, `{}`, nil)
			wantEntry(t, w.wait(qid, c.status), c.status, c.code, 1)
			if got := received.Load(); got != c.received {
				t.Fatalf("remote received %d requests, want %d", got, c.received)
			}
			if c.status != touba.StatusParked {
				if eff := w.effect(qid, "bill"); eff.State != touba.EffectApplied {
					t.Fatalf("effect %+v, want applied", eff)
				}
				return
			}
			if eff := w.effect(qid, "bill"); eff.State != touba.EffectUnknown || eff.Attempts != 1 {
				t.Fatalf("effect %+v, want unknown at attempt 1", eff)
			}
			w.replay(qid)
			w.waitRuns(qid, 2)
			wantEntry(t, w.wait(qid, touba.StatusParked), touba.StatusParked, c.code, 1)
			if got := received.Load(); got != 1 {
				t.Fatalf("remote received %d requests after a replay, want 1", got)
			}
		})
	}
}
