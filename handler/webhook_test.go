package handler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/protocol"
	"github.com/touba/touba-trigger/verify"
)

var testSecret = []byte("webhook-test-secret")

// server is an httptest server that counts the tries it sees and checks
// each one's signature, content type and Idempotency-Key.
type server struct {
	*httptest.Server
	calls atomic.Int32
}

// newServer starts a server answering with h (n is the try's number, from
// 1); wantKey is the Idempotency-Key every try must carry.
func newServer(tb testing.TB, wantKey string, h func(n int, w http.ResponseWriter, r *http.Request, body []byte)) *server {
	tb.Helper()
	s := &server{}
	var mu sync.Mutex
	var problems []string
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(s.calls.Add(1))
		body, err := io.ReadAll(r.Body)
		report := func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			problems = append(problems, fmt.Sprintf("try %d: ", n)+fmt.Sprintf(format, args...))
		}
		if err != nil {
			report("read body: %v", err)
		}
		if err := verify.Verify(testSecret, body, r.Header.Get("X-Signature")); err != nil {
			report("signature: %v", err)
		}
		if got := r.Header.Get("Idempotency-Key"); got != wantKey {
			report("Idempotency-Key = %q, want %q", got, wantKey)
		}
		if got := r.Header.Get("Content-Type"); got != "application/json" {
			report("Content-Type = %q", got)
		}
		if r.Method != http.MethodPost {
			report("method %s", r.Method)
		}
		h(n, w, r, body)
	}))
	// Cleanups run last-in first-out: the server closes (and its handlers
	// finish) before the problems are read.
	tb.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range problems {
			tb.Errorf("server saw a bad request: %s", p)
		}
	})
	tb.Cleanup(s.Close)
	return s
}

// mustWebhook returns a webhook runner for url with tiny backoff intervals.
func mustWebhook(tb testing.TB, url string, edit func(*handler.WebhookSpec)) handler.Runner {
	tb.Helper()
	spec := handler.WebhookSpec{URL: url, HMACSecret: testSecret, Limits: handler.Limits{Timeout: 5 * time.Second, MaxTries: 3,
		InitialInterval: time.Millisecond, MaxInterval: 5 * time.Millisecond}}
	if edit != nil {
		edit(&spec)
	}
	r, err := handler.NewWebhook(spec)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

// check asserts a Result's outcome and error code and the tries the server saw.
func check(tb testing.TB, res *handler.Result, outcome, code string, s *server, calls int) {
	tb.Helper()
	if got := res.Outcome; got != outcome {
		tb.Errorf("outcome = %q, want %q (err %v)", got, outcome, res.Err)
	}
	if got := errCode(res); got != code {
		tb.Errorf("code = %q, want %q (err %v)", got, code, res.Err)
	}
	if s != nil {
		if got := int(s.calls.Load()); got != calls {
			tb.Errorf("server saw %d tries, want %d", got, calls)
		}
	}
}

func TestWebhookProtocolResponse(t *testing.T) {
	req := newRequest(t, `{"order":1}`, touba.RetryIdempotencyKey)
	s := newServer(t, req.Context.Effect.EffectID, func(_ int, w http.ResponseWriter, _ *http.Request, body []byte) {
		var got handler.Request
		if err := json.Unmarshal(body, &got); err != nil || got.Context.Effect == nil || got.Protocol != protocol.Name {
			http.Error(w, "bad request document", http.StatusBadRequest)
			return
		}
		w.Header().Set(protocol.Header, protocol.Name)
		fmt.Fprintf(w, `{"ok":true,"output":{"order_id":42},"effect_receipt":{"effect_id":%q,"fingerprint":%q,"outcome":"applied","receipt_ref":"order:42"}}`,
			got.Context.Effect.EffectID, got.Context.Effect.Fingerprint)
	})
	var h hook
	res := mustWebhook(t, s.URL, nil).Call(context.Background(), req, h.fn)
	check(t, res, touba.EffectApplied, "", s, 1)
	if !res.OK || res.ReceiptRef != "order:42" || string(res.Output) != `{"order_id":42}` || h.n != 1 || !res.Dispatched {
		t.Fatalf("result = %+v, hook %d", res, h.n)
	}
}

func TestWebhookProtocolResponseWithWrongReceipt(t *testing.T) {
	req := newRequest(t, `{}`, touba.RetryIdempotencyKey)
	s := newServer(t, req.Context.Effect.EffectID, func(_ int, w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set(protocol.Header, protocol.Name)
		fmt.Fprint(w, `{"ok":true,"effect_receipt":{"effect_id":"other","fingerprint":"sha256:00","outcome":"applied"}}`)
	})
	res := mustWebhook(t, s.URL, nil).Call(context.Background(), req, func() error { return nil })
	check(t, res, touba.EffectUnknown, touba.EEffectReceiptMismatch, s, 1)
	if got, want := res.ReceiptErrorCode, touba.EEffectReceiptMismatch; got != want {
		t.Fatalf("receipt error = %q, want %q", got, want)
	}
}

// A 2xx without the header Touba-Protocol is applied with its body as
// output, whatever the body: {"ok": true} (Slack's Web API answers so) is
// no protocol response, and a receipt in it is not read. Before the
// header decided, such a body was read as a response without a receipt:
// EffectReceiptMissing, unknown, retried until the entry failed.
func TestWebhookPlainAnswers(t *testing.T) {
	for _, tt := range []struct {
		status     int
		body, want string
	}{
		{200, `{ "id": 7 }`, `{"id":7}`},
		{200, `{"ok": true}`, `{"ok":true}`},
		{200, `{"ok": false, "error": "channel_not_found"}`, `{"ok":false,"error":"channel_not_found"}`},
		{200, `{"ok":true,"effect_receipt":{"effect_id":"other","fingerprint":"sha256:00","outcome":"not_applied"}}`,
			`{"ok":true,"effect_receipt":{"effect_id":"other","fingerprint":"sha256:00","outcome":"not_applied"}}`},
		{201, `accepted`, `"accepted"`},
		{200, `{"ok":"not a protocol response"}`, `{"ok":"not a protocol response"}`},
		{204, ``, `""`},
		// Bytes that are not UTF-8: in JSON, \ufffd each, as encoding/json
		// writes them; in a plain body, the JSON string's U+FFFD.
		{200, `{"name": "caf` + "\xe9" + `", "nul": "\u0000"}`, `{"name":"caf\ufffd","nul":"\u0000"}`},
		{200, "caf\xe9\x00", `"caf\ufffd\u0000"`},
	} {
		req := newRequest(t, `{}`, touba.RetryNone)
		s := newServer(t, req.Context.Effect.EffectID, func(_ int, w http.ResponseWriter, _ *http.Request, _ []byte) {
			w.WriteHeader(tt.status)
			io.WriteString(w, tt.body)
		})
		res := mustWebhook(t, s.URL, nil).Call(context.Background(), req, func() error { return nil })
		check(t, res, touba.EffectApplied, "", s, 1)
		if got := string(res.Output); !res.OK || got != tt.want {
			t.Errorf("%d %q: ok %v output %s, want %s", tt.status, tt.body, res.OK, got, tt.want)
		}
	}
}

func TestWebhookRetryAfterThenOK(t *testing.T) {
	req := newRequest(t, `{}`, touba.RetryNone)
	s := newServer(t, req.Context.Effect.EffectID, func(n int, w http.ResponseWriter, _ *http.Request, _ []byte) {
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, `{"done":true}`)
	})
	const maxInterval = 200 * time.Millisecond
	r := mustWebhook(t, s.URL, func(s *handler.WebhookSpec) { s.MaxInterval = maxInterval })
	start := time.Now()
	res := r.Call(context.Background(), req, func() error { return nil })
	check(t, res, touba.EffectApplied, "", s, 2)
	// The backoff alone would wait about 1ms; Retry-After (1s, capped by
	// MaxInterval) makes it wait MaxInterval.
	if elapsed := time.Since(start); elapsed < maxInterval {
		t.Fatalf("retried after %s, before Retry-After capped at %s", elapsed, maxInterval)
	}
}

func TestWebhookRejected(t *testing.T) {
	req := newRequest(t, `{}`, touba.RetryIdempotencyKey)
	s := newServer(t, req.Context.Effect.EffectID, func(_ int, w http.ResponseWriter, _ *http.Request, _ []byte) {
		http.Error(w, "no such order", http.StatusBadRequest)
	})
	res := mustWebhook(t, s.URL, nil).Call(context.Background(), req, func() error { return nil })
	check(t, res, touba.EffectNotApplied, touba.EWebhookRejected, s, 1)
}

func TestWebhookRejectedAfterAnUncertainTry(t *testing.T) {
	// The 503 may have been applied before the server failed, so a later
	// 400 cannot prove nothing was.
	req := newRequest(t, `{}`, touba.RetryIdempotencyKey)
	s := newServer(t, req.Context.Effect.EffectID, func(n int, w http.ResponseWriter, _ *http.Request, _ []byte) {
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusConflict)
	})
	res := mustWebhook(t, s.URL, nil).Call(context.Background(), req, func() error { return nil })
	check(t, res, touba.EffectUnknown, touba.EWebhookRejected, s, 2)
}

// A redirect is not followed, and says neither applied nor refused: a
// "303 See Other" may answer a write that was made.
func TestWebhookRedirectIsNotFollowed(t *testing.T) {
	req := newRequest(t, `{}`, touba.RetryNone)
	s := newServer(t, req.Context.Effect.EffectID, func(_ int, w http.ResponseWriter, r *http.Request, _ []byte) {
		http.Redirect(w, r, "/elsewhere", http.StatusSeeOther)
	})
	res := mustWebhook(t, s.URL, nil).Call(context.Background(), req, func() error { return nil })
	check(t, res, touba.EffectUnknown, touba.EHandlerFailed, s, 1)
}

func TestWebhookWithoutEffect(t *testing.T) {
	req := newRequest(t, `{}`, "")
	s := newServer(t, req.Context.CallID, func(_ int, w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set(protocol.Header, protocol.Name)
		io.WriteString(w, `{"ok":true,"output":"read"}`)
	})
	res := mustWebhook(t, s.URL, nil).Call(context.Background(), req, func() error { return nil })
	check(t, res, "", "", s, 1)
	if !res.OK || string(res.Output) != `"read"` {
		t.Fatalf("result = %+v", res)
	}
}

func TestWebhookNotSent(t *testing.T) {
	req := newRequest(t, `{"text":"`+strings.Repeat("x", 100)+`"}`, touba.RetryNone)
	s := newServer(t, req.Context.Effect.EffectID, func(_ int, w http.ResponseWriter, _ *http.Request, _ []byte) {})
	var h hook
	res := mustWebhook(t, s.URL, func(s *handler.WebhookSpec) { s.MaxPayload = 64 }).Call(context.Background(), req, h.fn)
	check(t, res, touba.EffectNotApplied, touba.EHandlerPayloadTooLarge, s, 0)
	if h.n != 0 {
		t.Fatalf("hook ran %d times for an input too large", h.n)
	}
	h = hook{err: touba.Errorf(touba.EEffectInProgress, "taken")}
	res = mustWebhook(t, s.URL, nil).Call(context.Background(), req, h.fn)
	check(t, res, touba.EffectNotApplied, touba.EEffectInProgress, s, 0)
}

func TestWebhookAnswerTooLarge(t *testing.T) {
	req := newRequest(t, `{}`, touba.RetryIdempotencyKey)
	s := newServer(t, req.Context.Effect.EffectID, func(_ int, w http.ResponseWriter, _ *http.Request, _ []byte) {
		io.WriteString(w, `"`+strings.Repeat("x", 4096)+`"`)
	})
	res := mustWebhook(t, s.URL, func(s *handler.WebhookSpec) { s.MaxPayload = 1024 }).Call(context.Background(), req, func() error { return nil })
	check(t, res, touba.EffectUnknown, touba.EHandlerPayloadTooLarge, s, 1)
}

func TestNewWebhookRefusesBadSpecs(t *testing.T) {
	for _, spec := range []handler.WebhookSpec{
		{}, {URL: "ftp://x/"}, {URL: "/relative"}, {URL: "http://x/", Limits: handler.Limits{Timeout: -1}},
		{URL: "http://x/", Limits: handler.Limits{MaxTries: -1}},
	} {
		if _, err := handler.NewWebhook(spec); touba.ErrorCode(err) != touba.ECONFIG {
			t.Errorf("NewWebhook(%+v) = %v, want %s", spec, err, touba.ECONFIG)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"3", 3 * time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"Sun, 01 Mar 2026 12:00:10 GMT", 10 * time.Second, true},
		{"Sunday, 01-Mar-26 12:00:10 GMT", 10 * time.Second, true},
		{"Sun Mar  1 12:00:10 2026", 10 * time.Second, true},
		{"Sun, 01 Mar 2026 11:00:00 GMT", 0, true},
		{"99999999999999999999", time.Duration(1<<63 - 1), true},
		{"", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
	} {
		got, ok := handler.ParseRetryAfter(tt.in, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseRetryAfter(%q) = %s, %v; want %s, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"1", "Sun, 01 Mar 2026 12:00:10 GMT", "", "-5", "1e9"} {
		f.Add(s)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		if d, ok := handler.ParseRetryAfter(s, now); d < 0 || !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %s, %v", s, d, ok)
		}
	})
}

// What the journal records of a webhook request: no path or query, the
// headers whose values change with each call named, not shown.
func TestWebhookDescribe(t *testing.T) {
	r := mustWebhook(t, "https://hooks.test/services/T0/SECRETPATH?token=SECRETQUERY", nil)
	got, err := r.(handler.Describer).Describe(newRequest(t, `{}`, touba.RetryIdempotencyKey))
	want := "POST https://hooks.test/… Content-Type: application/json, Idempotency-Key: <effect id>, X-Signature: sha256=<HMAC of the body>"
	if err != nil || got != want {
		t.Fatalf("Describe = %q, %v; want %q", got, err, want)
	}
}
