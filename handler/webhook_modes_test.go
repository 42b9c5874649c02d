package handler_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
)

// failure is a way one webhook try can fail.
type failure string

const (
	fail5xx     failure = "502"          // the remote applies, then answers 502
	failTimeout failure = "timeout"      // the remote applies, then never answers
	failDropped failure = "dropped"      // the remote reads the request, then closes the connection
	fail429     failure = "429"          // the remote refuses to look
	failRefused failure = "conn refused" // nothing listens: the request never leaves
	tries               = 3              // MaxTries of mustWebhook
	perTry              = 150 * time.Millisecond
)

// outcome is what a call should come to: its outcome, its error code and
// the requests the remote received (for failRefused: the dials made).
type outcome struct {
	outcome, code string
	received      int
}

// SPEC §2.2: with idempotency_key, 429, 5xx and network errors are retried
// inside the call; with reconcile or none, only 429 and a request that
// certainly never left are, and a 5xx, a timeout or a connection lost after
// sending ends the call at once as unknown: a remote that applied the write
// receives it exactly once.
func TestWebhookRetriesByModeAndFailure(t *testing.T) {
	applied := outcome{touba.EffectApplied, "", 2}
	refused := outcome{touba.EffectNotApplied, touba.EHandlerFailed, tries}
	for _, tt := range []struct {
		mode string
		f    failure
		// first: the first try fails and the next ones would succeed;
		// always: every try fails.
		first, always outcome
	}{
		{touba.RetryIdempotencyKey, fail5xx, applied, outcome{touba.EffectUnknown, touba.EHandlerFailed, tries}},
		{touba.RetryIdempotencyKey, failTimeout, applied, outcome{touba.EffectUnknown, touba.EHandlerTimeout, tries}},
		{touba.RetryIdempotencyKey, failDropped, applied, outcome{touba.EffectUnknown, touba.EHandlerFailed, tries}},
		{touba.RetryIdempotencyKey, fail429, applied, outcome{touba.EffectUnknown, touba.EHandlerFailed, tries}},
		{touba.RetryIdempotencyKey, failRefused, refused, refused},
		{touba.RetryReconcile, fail5xx, outcome{touba.EffectUnknown, touba.EHandlerFailed, 1}, outcome{touba.EffectUnknown, touba.EHandlerFailed, 1}},
		{touba.RetryReconcile, failTimeout, outcome{touba.EffectUnknown, touba.EHandlerTimeout, 1}, outcome{touba.EffectUnknown, touba.EHandlerTimeout, 1}},
		{touba.RetryReconcile, failDropped, outcome{touba.EffectUnknown, touba.EHandlerFailed, 1}, outcome{touba.EffectUnknown, touba.EHandlerFailed, 1}},
		{touba.RetryReconcile, fail429, applied, outcome{touba.EffectUnknown, touba.EHandlerFailed, tries}},
		{touba.RetryReconcile, failRefused, refused, refused},
		{touba.RetryNone, fail5xx, outcome{touba.EffectUnknown, touba.EHandlerFailed, 1}, outcome{touba.EffectUnknown, touba.EHandlerFailed, 1}},
		{touba.RetryNone, failTimeout, outcome{touba.EffectUnknown, touba.EHandlerTimeout, 1}, outcome{touba.EffectUnknown, touba.EHandlerTimeout, 1}},
		{touba.RetryNone, failDropped, outcome{touba.EffectUnknown, touba.EHandlerFailed, 1}, outcome{touba.EffectUnknown, touba.EHandlerFailed, 1}},
		{touba.RetryNone, fail429, applied, outcome{touba.EffectUnknown, touba.EHandlerFailed, tries}},
		{touba.RetryNone, failRefused, refused, refused},
	} {
		for _, always := range []bool{false, true} {
			want, name := tt.first, tt.mode+"/"+string(tt.f)+"/then ok"
			if always {
				want, name = tt.always, tt.mode+"/"+string(tt.f)+"/every try"
			}
			t.Run(name, func(t *testing.T) {
				req := newRequest(t, `{"order":1}`, tt.mode)
				var h hook
				res, received := callFailing(t, req, tt.f, always, h.fn)
				check(t, res, want.outcome, want.code, nil, 0)
				if received != want.received {
					t.Errorf("remote received %d requests (dials for %q), want %d", received, tt.f, want.received)
				}
				if h.n != 1 || !res.Dispatched {
					t.Errorf("dispatched hook ran %d times, Dispatched %v; want once, true", h.n, res.Dispatched)
				}
			})
		}
	}
}

// callFailing calls a webhook whose remote fails as f on the first try (or
// on every try when always), then answers 200; it returns the result and
// the requests the remote received, or for failRefused the dials made.
func callFailing(t *testing.T, req *handler.Request, f failure, always bool, hook func() error) (*handler.Result, int) {
	t.Helper()
	var dials atomic.Int32
	var d net.Dialer
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}}}
	t.Cleanup(client.CloseIdleConnections)
	edit := func(s *handler.WebhookSpec) { s.Outbound.Client, s.Timeout = client, perTry }
	if f == failRefused {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		res := mustWebhook(t, "http://"+addr+"/hook", edit).Call(context.Background(), req, hook)
		return res, int(dials.Load())
	}
	s := newServer(t, req.Context.Effect.EffectID, func(n int, w http.ResponseWriter, r *http.Request, _ []byte) {
		if n > 1 && !always {
			io.WriteString(w, `{"done":true}`)
			return
		}
		switch f {
		case fail5xx:
			w.WriteHeader(http.StatusBadGateway)
		case fail429:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
		case failTimeout:
			<-r.Context().Done() // the client gave up
		case failDropped:
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				panic(err)
			}
			conn.Close()
		}
	})
	res := mustWebhook(t, s.URL, edit).Call(context.Background(), req, hook)
	return res, int(s.calls.Load())
}

// A 429 to the last of the default tries is unknown, in every mode: the
// budget is the spec's first try and 5 retries.
func TestWebhookRateLimitedToTheLastTry(t *testing.T) {
	req := newRequest(t, `{}`, touba.RetryNone)
	s := newServer(t, req.Context.Effect.EffectID, func(_ int, w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.WriteHeader(http.StatusTooManyRequests)
	})
	res := mustWebhook(t, s.URL, func(s *handler.WebhookSpec) { s.MaxTries = 0 }).Call(context.Background(), req, func() error { return nil })
	check(t, res, touba.EffectUnknown, touba.EHandlerFailed, s, handler.DefaultMaxTries)
}

// With idempotency_key, a 5xx is retried to the last of the default tries.
func TestWebhookServerErrorToTheLastTry(t *testing.T) {
	req := newRequest(t, `{}`, touba.RetryIdempotencyKey)
	s := newServer(t, req.Context.Effect.EffectID, func(_ int, w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.WriteHeader(http.StatusBadGateway)
	})
	res := mustWebhook(t, s.URL, func(s *handler.WebhookSpec) { s.MaxTries = 0 }).Call(context.Background(), req, func() error { return nil })
	check(t, res, touba.EffectUnknown, touba.EHandlerFailed, s, handler.DefaultMaxTries)
}
