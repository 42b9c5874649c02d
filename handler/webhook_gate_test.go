package handler_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
)

// unavailable is a remote that answers every try 503.
func unavailable(tb testing.TB, req *handler.Request) *server {
	tb.Helper()
	return newServer(tb, req.Context.Effect.EffectID, func(_ int, w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.WriteHeader(http.StatusServiceUnavailable)
	})
}

// A circuit that opens while a call is in flight stops its tries (SPEC
// §2.2): with a gate that turns false once the remote saw 2 tries, exactly
// 2 reach it, and the call ends as the last of them says, as when MaxTries
// is reached; without a gate, every try of the budget goes.
func TestWebhookGateStopsTheTries(t *testing.T) {
	spec := func(s *handler.WebhookSpec) { s.MaxTries = 5 }

	req := newRequest(t, `{}`, touba.RetryIdempotencyKey)
	s := unavailable(t, req)
	gatedURL := s.URL
	var asked atomic.Int32
	ctx := handler.WithTryGate(context.Background(), func() bool {
		asked.Add(1)
		return s.calls.Load() < 2
	})
	res := mustWebhook(t, s.URL, spec).Call(ctx, req, func() error { return nil })
	check(t, res, touba.EffectUnknown, touba.EHandlerFailed, s, 2)
	if res.Err == nil || !strings.Contains(res.Err.Message, "503") || !res.Dispatched {
		t.Fatalf("result = %+v, want the 503 of the last try", res)
	}
	if asked.Load() == 0 {
		t.Fatal("the gate was never asked")
	}

	// The same call with the budget run out at 2 tries gives the same
	// result (but for the remote's address).
	req = newRequest(t, `{}`, touba.RetryIdempotencyKey)
	s = unavailable(t, req)
	budget := mustWebhook(t, s.URL, func(s *handler.WebhookSpec) { s.MaxTries = 2 }).Call(context.Background(), req, func() error { return nil })
	check(t, budget, res.Outcome, errCode(res), s, 2)
	if got, want := strings.ReplaceAll(res.Err.Message, gatedURL, "REMOTE"), strings.ReplaceAll(budget.Err.Message, s.URL, "REMOTE"); got != want {
		t.Fatalf("gated call: %q; call out of tries: %q", got, want)
	}

	// No gate: the whole budget.
	req = newRequest(t, `{}`, touba.RetryIdempotencyKey)
	s = unavailable(t, req)
	res = mustWebhook(t, s.URL, spec).Call(context.Background(), req, func() error { return nil })
	check(t, res, touba.EffectUnknown, touba.EHandlerFailed, s, 5)
}

// A gate that closes during the backoff wait (the circuit opened just
// after the runner was let go on) stops the try that wait led to: the
// runner asks again right before sending.
func TestWebhookGateClosedDuringTheWait(t *testing.T) {
	req := newRequest(t, `{}`, touba.RetryIdempotencyKey)
	s := unavailable(t, req)
	var asked atomic.Int32
	ctx := handler.WithTryGate(context.Background(), func() bool { return asked.Add(1) == 1 })
	res := mustWebhook(t, s.URL, func(s *handler.WebhookSpec) { s.MaxTries = 5 }).Call(ctx, req, func() error { return nil })
	check(t, res, touba.EffectUnknown, touba.EHandlerFailed, s, 1)
	if got := asked.Load(); got != 2 {
		t.Fatalf("gate asked %d times, want 2 (before the wait and after it)", got)
	}
}

// The gate governs the tries after the first only (the first is the
// caller's to allow), and leaves the outcome rules of each retry_mode as
// they are: a closed gate ends a 429 in mode none as unknown, the same as
// a 429 to the last try; a first try that succeeds is applied.
func TestWebhookGateLeavesTheFirstTry(t *testing.T) {
	closed := handler.WithTryGate(context.Background(), func() bool { return false })

	req := newRequest(t, `{}`, touba.RetryNone)
	s := newServer(t, req.Context.Effect.EffectID, func(_ int, w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.WriteHeader(http.StatusTooManyRequests)
	})
	var h hook
	res := mustWebhook(t, s.URL, nil).Call(closed, req, h.fn)
	check(t, res, touba.EffectUnknown, touba.EHandlerFailed, s, 1)
	if h.n != 1 {
		t.Fatalf("dispatched hook ran %d times, want 1", h.n)
	}

	req = newRequest(t, `{}`, touba.RetryNone)
	s = newServer(t, req.Context.Effect.EffectID, func(_ int, w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Write([]byte(`{"done":true}`))
	})
	res = mustWebhook(t, s.URL, nil).Call(closed, req, func() error { return nil })
	check(t, res, touba.EffectApplied, "", s, 1)
}

func TestTryAllowed(t *testing.T) {
	ctx := context.Background()
	if !handler.TryAllowed(ctx) || !handler.TryAllowed(handler.WithTryGate(ctx, nil)) {
		t.Fatal("a context without a gate refused a try")
	}
	var open, inner atomic.Bool
	open.Store(true)
	inner.Store(true)
	g := handler.WithTryGate(handler.WithTryGate(ctx, open.Load), inner.Load)
	if !handler.TryAllowed(g) {
		t.Fatal("two open gates refused a try")
	}
	open.Store(false)
	if handler.TryAllowed(g) {
		t.Fatal("a closed outer gate allowed a try")
	}
	open.Store(true)
	inner.Store(false)
	if handler.TryAllowed(g) {
		t.Fatal("a closed inner gate allowed a try")
	}
}
