package handler_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/internal/testkit"
)

// bearerToken is the secret the tests' bindings send as a bearer token; no
// stored or shown field may hold it.
const bearerToken = "tok_live_5fQ9x2Lr8Zp1Vw7"

// seen is one request an API received.
type seen struct {
	method, path, rawQuery string
	header                 http.Header
	body                   string
}

// api is a real HTTP server on loopback that records what it receives and
// answers with h (n is the request's number, from 1).
type api struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
	n    atomic.Int32
}

func newAPI(tb testing.TB, h func(n int, w http.ResponseWriter, r *http.Request)) *api {
	tb.Helper()
	a := &api{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		a.mu.Lock()
		a.reqs = append(a.reqs, seen{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Clone(), string(body)})
		a.mu.Unlock()
		h(int(a.n.Add(1)), w, r)
	}))
	tb.Cleanup(a.Close)
	return a
}

func (a *api) received() []seen {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]seen(nil), a.reqs...)
}

// mustHTTP returns an http runner with tiny backoff intervals and the
// bearer header from the binding's secret ORDERS_TOKEN.
func mustHTTP(tb testing.TB, url string, edit func(*handler.HTTPSpec)) handler.Runner {
	tb.Helper()
	spec := handler.HTTPSpec{Method: http.MethodPut, URL: url, IdempotencyHeader: handler.DefaultIdempotencyHeader,
		Headers: []handler.Header{{Name: "Authorization", Secret: "ORDERS_TOKEN", Format: "Bearer %s"},
			{Name: "X-Shop", Literal: "eu-1"}},
		Secrets: map[string]string{"ORDERS_TOKEN": bearerToken},
		Limits:  handler.Limits{Timeout: 5 * time.Second, MaxTries: 3, InitialInterval: time.Millisecond, MaxInterval: 5 * time.Millisecond}}
	if edit != nil {
		edit(&spec)
	}
	r, err := handler.NewHTTP(spec)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

// The request an http binding sends: its method, the URL with each
// placeholder percent-encoded as one segment or value, the bearer token
// from the secret, the effect id as Idempotency-Key, the whole input as the
// body; a 201 is applied, and the output is the status, the selected
// headers and the body.
func TestHTTPRequestAndApplied(t *testing.T) {
	s := newAPI(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Location", "/orders/a%2Fb%20c")
		w.Header().Set("Set-Cookie", "session=abc")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id": "ord_1", "status": "paid"}`)
	})
	var logs syncBuffer
	r := mustHTTP(t, s.URL+"/orders/{/order/id}/payment?customer={/customer}&mode=live", func(sp *handler.HTTPSpec) {
		sp.Log = zerolog.New(&logs).Level(zerolog.DebugLevel)
	})
	req := newRequest(t, `{"order": {"id": "a/b c"}, "customer": "ü&x=1", "amount": 2000}`, touba.RetryIdempotencyKey)
	var h hook
	res := r.Call(context.Background(), req, h.fn)
	if !res.OK || res.Outcome != touba.EffectApplied || h.n != 1 || res.Detail != "http_status=201" {
		t.Fatalf("result %+v (err %v), hook %d; want ok, applied, http_status=201", res, res.Err, h.n)
	}
	var out struct {
		Status  int               `json:"status"`
		Headers map[string]string `json:"headers"`
		Body    map[string]string `json:"body"`
	}
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatalf("output %s: %v", res.Output, err)
	}
	if out.Status != 201 || out.Body["id"] != "ord_1" || out.Headers["location"] != "/orders/a%2Fb%20c" ||
		out.Headers["content-type"] != "application/json" || out.Headers["set-cookie"] != "" {
		t.Fatalf("output %s: want status 201, the body, location and content-type, no set-cookie", res.Output)
	}
	got := s.received()
	if len(got) != 1 {
		t.Fatalf("API received %d requests, want 1", len(got))
	}
	g := got[0]
	for _, c := range []struct{ what, got, want string }{
		{"method", g.method, "PUT"},
		{"path", g.path, "/orders/a%2Fb%20c/payment"},
		{"query", g.rawQuery, "customer=%C3%BC%26x%3D1&mode=live"},
		{"Authorization", g.header.Get("Authorization"), "Bearer " + bearerToken},
		{"Idempotency-Key", g.header.Get("Idempotency-Key"), req.Context.Effect.EffectID},
		{"X-Shop", g.header.Get("X-Shop"), "eu-1"},
		{"Content-Type", g.header.Get("Content-Type"), "application/json"},
		{"body", g.body, `{"order": {"id": "a/b c"}, "customer": "ü&x=1", "amount": 2000}`},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
		}
	}
	// What the journal records of the request, and the logs: no secret.
	desc, derr := r.(handler.Describer).Describe(req)
	if derr != nil {
		t.Fatal(derr)
	}
	host := strings.TrimPrefix(s.URL, "http://")
	if want := "PUT http://" + host + "/… Authorization: <secret ORDERS_TOKEN>, Content-Type: application/json, " +
		"Idempotency-Key: <effect id>, X-Shop: eu-1"; desc != want {
		t.Errorf("Describe = %q,\nwant       %q", desc, want)
	}
	for what, text := range map[string]string{"output": string(res.Output), "description": desc, "logs": logs.String()} {
		if strings.Contains(text, bearerToken) || strings.Contains(text, "a%2Fb") && what != "output" {
			t.Errorf("the %s holds the token or the path: %s", what, text)
		}
	}
}

// The body can be a part of the input, or nothing; the idempotency header
// can be renamed, or not sent; a literal credential header is not shown.
func TestHTTPBodyAndHeaders(t *testing.T) {
	s := newAPI(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	req := newRequest(t, `{"order": {"id": 7, "lines": [1, 2]}, "note": "<&>"}`, touba.RetryNone)
	r := mustHTTP(t, s.URL+"/o/{/order/id}", func(sp *handler.HTTPSpec) {
		sp.Method, sp.BodyRef, sp.IdempotencyHeader = http.MethodPatch, "/order", "X-Request-Key"
		sp.Headers = append(sp.Headers, handler.Header{Name: "X-Api-Key", Literal: "literal-key-123"})
	})
	res := r.Call(context.Background(), req, func() error { return nil })
	if !res.OK || string(res.Output) != `{"status":204,"headers":{},"body":null}` {
		t.Fatalf("result %+v output %s", res, res.Output)
	}
	r2 := mustHTTP(t, s.URL+"/o/{/order/id}", func(sp *handler.HTTPSpec) {
		sp.Method, sp.NoBody, sp.IdempotencyHeader = http.MethodDelete, true, ""
	})
	if res := r2.Call(context.Background(), req, func() error { return nil }); !res.OK {
		t.Fatalf("DELETE: %+v", res)
	}
	got := s.received()
	if len(got) != 2 {
		t.Fatalf("received %d, want 2", len(got))
	}
	if g := got[0]; g.method != "PATCH" || g.path != "/o/7" || g.body != `{"id":7,"lines":[1,2]}` ||
		g.header.Get("X-Request-Key") != req.Context.Effect.EffectID || g.header.Get("Idempotency-Key") != "" {
		t.Errorf("PATCH received %+v", g)
	}
	if g := got[1]; g.method != "DELETE" || g.body != "" || g.header.Get("Idempotency-Key") != "" || g.header.Get("Content-Type") != "" {
		t.Errorf("DELETE received %+v", g)
	}
	desc, _ := r.(handler.Describer).Describe(req)
	if strings.Contains(desc, "literal-key-123") || !strings.Contains(desc, "X-Api-Key: …") || !strings.Contains(desc, "X-Request-Key: <effect id>") {
		t.Errorf("Describe = %q: want the literal key hidden and the renamed idempotency header", desc)
	}
}

// A placeholder that resolves to an object, to nothing or to an empty
// segment fails the call StepInputUnresolved before anything is sent, and
// Describe refuses it the same way (the dispatcher asks it before
// journaling anything).
func TestHTTPPlaceholderUnresolved(t *testing.T) {
	s := newAPI(t, func(_ int, w http.ResponseWriter, _ *http.Request) {})
	for _, input := range []string{`{"order": {"id": {"nested": 1}}}`, `{"order": {}}`, `{"order": {"id": ""}}`,
		`{"order": {"id": null}}`, `{"order": {"id": [1]}}`} {
		req := newRequest(t, input, touba.RetryIdempotencyKey)
		r := mustHTTP(t, s.URL+"/orders/{/order/id}", nil)
		var h hook
		res := r.Call(context.Background(), req, h.fn)
		check(t, res, touba.EffectNotApplied, touba.EStepInputUnresolved, nil, 0)
		if h.n != 0 || res.Dispatched {
			t.Errorf("%s: dispatched (hook %d)", input, h.n)
		}
		if _, err := r.(handler.Describer).Describe(req); err == nil || err.Code != touba.EStepInputUnresolved {
			t.Errorf("%s: Describe = %v, want StepInputUnresolved", input, err)
		}
	}
	if n := len(s.received()); n != 0 {
		t.Fatalf("API received %d requests, want none", n)
	}
}

// A 4xx is not_applied HttpRejected with its status; a 409 is that under
// reconcile and none, and under idempotency_key a retried unknown (the
// remote still works on the same key).
func TestHTTPRejectedAndConflict(t *testing.T) {
	for _, tt := range []struct {
		mode     string
		status   int
		outcome  string
		code     string
		received int
	}{
		{touba.RetryIdempotencyKey, http.StatusUnprocessableEntity, touba.EffectNotApplied, touba.EHttpRejected, 1},
		{touba.RetryReconcile, http.StatusUnprocessableEntity, touba.EffectNotApplied, touba.EHttpRejected, 1},
		{touba.RetryIdempotencyKey, http.StatusConflict, touba.EffectUnknown, touba.EHandlerFailed, 3},
		{touba.RetryReconcile, http.StatusConflict, touba.EffectNotApplied, touba.EHttpRejected, 1},
		{touba.RetryNone, http.StatusConflict, touba.EffectNotApplied, touba.EHttpRejected, 1},
	} {
		s := newAPI(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			http.Error(w, `{"error": "nope"}`, tt.status)
		})
		res := mustHTTP(t, s.URL+"/x", nil).Call(context.Background(), newRequest(t, `{}`, tt.mode), func() error { return nil })
		if res.Outcome != tt.outcome || errCode(res) != tt.code || len(s.received()) != tt.received {
			t.Errorf("%s %d: %s %s after %d requests, want %s %s after %d", tt.mode, tt.status, res.Outcome, errCode(res),
				len(s.received()), tt.outcome, tt.code, tt.received)
		}
		if want := "http_status=" + strconv.Itoa(tt.status); res.Detail != want || !strings.Contains(res.Err.Message, strconv.Itoa(tt.status)) {
			t.Errorf("%s %d: detail %q message %q, want the status", tt.mode, tt.status, res.Detail, res.Err.Message)
		}
	}
	// A 409 then a 200 under idempotency_key: applied on the second try.
	s := newAPI(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			w.WriteHeader(http.StatusConflict)
		}
	})
	res := mustHTTP(t, s.URL+"/x", nil).Call(context.Background(), newRequest(t, `{}`, touba.RetryIdempotencyKey), func() error { return nil })
	if res.Outcome != touba.EffectApplied || len(s.received()) != 2 {
		t.Fatalf("409 then 200: %s after %d requests", res.Outcome, len(s.received()))
	}
}

// 5xx and Retry-After: retried under idempotency_key, honouring the
// server's Retry-After (capped by MaxInterval); under reconcile a 503 is
// unknown at once, and a 429 (the remote refused to look) is retried.
func TestHTTPServerErrorsAndRetryAfter(t *testing.T) {
	const maxInterval = 300 * time.Millisecond
	for _, tt := range []struct {
		mode, outcome string
		first         int
		received      int
	}{
		{touba.RetryIdempotencyKey, touba.EffectApplied, http.StatusServiceUnavailable, 2},
		{touba.RetryReconcile, touba.EffectUnknown, http.StatusServiceUnavailable, 1},
		{touba.RetryNone, touba.EffectUnknown, http.StatusBadGateway, 1},
		{touba.RetryReconcile, touba.EffectApplied, http.StatusTooManyRequests, 2},
	} {
		s := newAPI(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n == 1 {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(tt.first)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		r := mustHTTP(t, s.URL+"/x", func(sp *handler.HTTPSpec) { sp.MaxInterval = maxInterval })
		start := time.Now()
		res := r.Call(context.Background(), newRequest(t, `{}`, tt.mode), func() error { return nil })
		if res.Outcome != tt.outcome || len(s.received()) != tt.received {
			t.Errorf("%s, first %d: %s (%v) after %d requests, want %s after %d", tt.mode, tt.first, res.Outcome, res.Err,
				len(s.received()), tt.outcome, tt.received)
		}
		// The backoff alone waits about a millisecond.
		if tt.received == 2 && time.Since(start) < maxInterval {
			t.Errorf("%s: retried after %s, before Retry-After (capped at %s)", tt.mode, time.Since(start), maxInterval)
		}
	}
}

// A timeout after the request was sent is unknown, and under reconcile and
// none the request is never sent again: the remote got it exactly once.
// Under idempotency_key it is sent again with the same key.
func TestHTTPTimeoutAfterSending(t *testing.T) {
	for _, tt := range []struct {
		mode     string
		received int
	}{{touba.RetryReconcile, 1}, {touba.RetryNone, 1}, {touba.RetryIdempotencyKey, 3}} {
		release := make(chan struct{})
		s := newAPI(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			select { // applied, then no answer in time
			case <-release:
			case <-r.Context().Done():
			}
		})
		r := mustHTTP(t, s.URL+"/x", func(sp *handler.HTTPSpec) { sp.Timeout = 300 * time.Millisecond })
		req := newRequest(t, `{}`, tt.mode)
		res := r.Call(context.Background(), req, func() error { return nil })
		close(release)
		check(t, res, touba.EffectUnknown, touba.EHandlerTimeout, nil, 0)
		// The server may record a request after the client gave up on it.
		testkit.WaitFor(t, 10*time.Second, func() bool { return len(s.received()) >= tt.received }, "the requests sent")
		got := s.received()
		if len(got) != tt.received {
			t.Errorf("%s: the API received %d requests, want %d", tt.mode, len(got), tt.received)
		}
		for _, g := range got {
			if g.header.Get("Idempotency-Key") != req.Context.Effect.EffectID {
				t.Errorf("%s: a try without the effect id as its key", tt.mode)
			}
		}
	}
}

// A redirect is not followed: its target never sees the request (nor its
// bearer token), and the call is unknown.
func TestHTTPRedirectNotFollowed(t *testing.T) {
	target := newAPI(t, func(_ int, w http.ResponseWriter, _ *http.Request) {})
	s := newAPI(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/steal", http.StatusTemporaryRedirect)
	})
	res := mustHTTP(t, s.URL+"/x", nil).Call(context.Background(), newRequest(t, `{}`, touba.RetryNone), func() error { return nil })
	check(t, res, touba.EffectUnknown, touba.EHandlerFailed, nil, 0)
	if n := len(target.received()); n != 0 {
		t.Fatalf("the redirect's target received %d requests", n)
	}
}

// NewHTTP refuses what cannot be sent, without quoting a secret.
func TestNewHTTPRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*handler.HTTPSpec)
		want string
	}{
		{"GET", func(s *handler.HTTPSpec) { s.Method = http.MethodGet }, "method"},
		{"placeholder in host", func(s *handler.HTTPSpec) { s.URL = "https://{/host}/x" }, "literal"},
		{"unknown secret", func(s *handler.HTTPSpec) { s.Headers[0].Secret = "OTHER" }, "OTHER"},
		{"secret with a line break", func(s *handler.HTTPSpec) { s.Secrets["ORDERS_TOKEN"] = bearerToken + "\r\nX-Evil: 1" }, "line break"},
		{"bad header name", func(s *handler.HTTPSpec) { s.Headers[1].Name = "X Shop" }, "header name"},
		{"CA without a certificate", func(s *handler.HTTPSpec) { s.CA = []byte("not PEM") }, "ca_file"},
		{"bad client key", func(s *handler.HTTPSpec) { s.ClientCert, s.ClientKey = "x", bearerToken }, "client_certificate"},
	} {
		spec := handler.HTTPSpec{URL: "https://api.test/x", Headers: []handler.Header{{Name: "Authorization", Secret: "ORDERS_TOKEN", Format: "Bearer %s"},
			{Name: "X-Shop", Literal: "1"}}, Secrets: map[string]string{"ORDERS_TOKEN": bearerToken}}
		tt.edit(&spec)
		_, err := handler.NewHTTP(spec)
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), bearerToken) {
			t.Errorf("%s: %v, want a refusal naming %q without the secret", tt.name, err, tt.want)
		}
	}
}

// The http kind shares the webhook's try loop: a circuit that opens while
// the call is in flight (its try gate turns false) stops the tries, and a
// cancelled context (the lease about to run out) ends the call with the
// last try's result.
func TestHTTPTryGateAndCancel(t *testing.T) {
	s := newAPI(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	r := mustHTTP(t, s.URL+"/x", func(sp *handler.HTTPSpec) { sp.MaxTries = 5 })
	ctx := handler.WithTryGate(context.Background(), func() bool { return len(s.received()) < 2 })
	res := r.Call(ctx, newRequest(t, `{}`, touba.RetryIdempotencyKey), func() error { return nil })
	if res.Outcome != touba.EffectUnknown || len(s.received()) != 2 {
		t.Fatalf("gated: %s after %d requests, want unknown after 2", res.Outcome, len(s.received()))
	}
	cctx, cancel := context.WithCancel(context.Background())
	s2 := newAPI(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		cancel()
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	r2 := mustHTTP(t, s2.URL+"/x", func(sp *handler.HTTPSpec) { sp.MaxTries = 5 })
	res = r2.Call(cctx, newRequest(t, `{}`, touba.RetryIdempotencyKey), func() error { return nil })
	if res.Outcome != touba.EffectUnknown || len(s2.received()) != 1 {
		t.Fatalf("cancelled: %s after %d requests, want unknown after 1", res.Outcome, len(s2.received()))
	}
}
