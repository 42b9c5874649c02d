package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/rs/zerolog"
	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/verify"
)

// Defaults of a WebhookSpec.
const (
	DefaultWebhookTimeout  = 30 * time.Second
	DefaultMaxTries        = 6 // the first try and 5 retries (SPEC §2.2)
	DefaultInitialInterval = 500 * time.Millisecond
	DefaultMaxInterval     = 30 * time.Second
)

// drainLimit bounds how much of an unused response body is read so the
// connection can be reused.
const drainLimit = 64 << 10

// WebhookSpec configures a webhook handler (SPEC §2.2 kind "webhook").
type WebhookSpec struct {
	URL        string
	Timeout    time.Duration // per try; 0 means DefaultWebhookTimeout
	HMACSecret []byte        // signs the body as X-Signature when set
	MaxPayload int64         // bounds the input and the response body; 0 means DefaultMaxPayload
	MaxTries   int           // tries within one call; 0 means DefaultMaxTries
	// InitialInterval and MaxInterval shape the exponential backoff between
	// tries; MaxInterval also caps a server's Retry-After.
	InitialInterval, MaxInterval time.Duration
	// Client sends the requests; nil means a client of its own that does
	// not follow redirects.
	Client *http.Client
	Log    zerolog.Logger
}

// webhookRunner POSTs the protocol request to a URL, signed.
type webhookRunner struct {
	spec      WebhookSpec
	client    *http.Client
	ownClient bool
	log       zerolog.Logger
	closed    atomic.Bool
}

// NewWebhook returns a Runner that POSTs each request to spec.URL.
func NewWebhook(spec WebhookSpec) (Runner, error) {
	u, err := url.Parse(spec.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, touba.Errorf(touba.ECONFIG, "webhook handler: url must be an absolute http or https URL")
	}
	if spec.Timeout < 0 || spec.MaxPayload < 0 || spec.MaxTries < 0 || spec.InitialInterval < 0 || spec.MaxInterval < 0 {
		return nil, touba.Errorf(touba.ECONFIG, "webhook handler: negative timeout, limit or interval")
	}
	orDefault(&spec.Timeout, DefaultWebhookTimeout)
	orDefault(&spec.MaxPayload, DefaultMaxPayload)
	orDefault(&spec.MaxTries, DefaultMaxTries)
	orDefault(&spec.InitialInterval, DefaultInitialInterval)
	orDefault(&spec.MaxInterval, DefaultMaxInterval)
	spec.MaxInterval = max(spec.MaxInterval, spec.InitialInterval)
	w := &webhookRunner{spec: spec, client: spec.Client,
		log: spec.Log.With().Str("handler", "webhook").Str("url", RedactURL(spec.URL)).Logger()}
	if w.client == nil {
		w.ownClient = true
		w.client = &http.Client{
			Transport: http.DefaultTransport.(*http.Transport).Clone(),
			// A redirect of a signed POST is an answer, not an instruction.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return w, nil
}

// Close makes later calls fail without being sent.
func (w *webhookRunner) Close() error {
	if !w.closed.Swap(true) && w.ownClient {
		w.client.CloseIdleConnections()
	}
	return nil
}

// Call POSTs req, retrying as SPEC §2.2 says while ctx's try gate allows
// (WithTryGate). See Runner.
func (w *webhookRunner) Call(ctx context.Context, req *Request, dispatched func() error) *Result {
	log := w.log.With().Str("call_id", req.Context.CallID).Str("tool_ref", req.ToolRef).Logger()
	if res := refuseUnsent(req, w.closed.Load(), w.spec.MaxPayload); res != nil {
		return res
	}
	body, err := encodeRequest(req, callDeadline(ctx, 0))
	if err != nil {
		return fail(req, touba.EffectNotApplied, false, touba.Errorf(touba.EINTERNAL, "%v", err))
	}
	if err := context.Cause(ctx); err != nil {
		return fail(req, touba.EffectNotApplied, false, touba.Errorf(touba.EHandlerTimeout, "call cancelled before sending: %v", err))
	}
	hdr := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"touba-trigger"}}
	if key := effectID(req); key != "" {
		hdr.Set("Idempotency-Key", key)
	}
	if tp := req.Context.TraceParent; tp != "" {
		hdr.Set("Traceparent", tp) // W3C trace context: the remote service joins the trace
	}
	if len(w.spec.HMACSecret) > 0 {
		hdr.Set(verify.OutboundHeader, verify.Sign(w.spec.HMACSecret, body))
	}
	if err := dispatched(); err != nil {
		return fail(req, touba.EffectNotApplied, false, hookError(err))
	}

	// A try that may have reached the server is repeated only when the
	// server is known to deduplicate (idempotency_key) or there is no
	// effect. For reconcile and none, a 5xx, a timeout or a connection
	// lost after sending may come after the remote applied the write, so
	// repeating it could apply the write twice: its unknown outcome goes
	// back to the journal at once (SPEC §2.2). Only a 429 (the remote
	// refused to look) and a request that certainly never left are retried
	// in every mode.
	repeatable := req.Context.Effect == nil || req.Context.Effect.RetryMode == touba.RetryIdempotencyKey
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = w.spec.InitialInterval, w.spec.MaxInterval, 0
	bo.Reset()
	maybeSent := false
	for n := 1; ; n++ {
		t := w.send(ctx, body, hdr)
		t.err = redactError(t.err, w.spec.URL) // before anything shows it
		log.Debug().Int("try", n).Int("status", t.status).Err(t.err).Msg("webhook try")
		res, final := t.result(req, w.spec, maybeSent)
		maybeSent = maybeSent || t.kind != tryNeverLeft
		if final || !repeatable && !t.neverApplied() || n >= w.spec.MaxTries || ctx.Err() != nil {
			return ended(log, n, res)
		}
		// A circuit that opened while the call was in flight sends no
		// further try (SPEC §2.2): asked before the wait and again right
		// before sending, the call ends with this try's result, as if
		// the retry budget ran out here.
		if !TryAllowed(ctx) {
			return gated(log, n, res)
		}
		wait := bo.NextBackOff()
		if t.retryAfter >= 0 {
			wait = min(t.retryAfter, w.spec.MaxInterval)
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return res
		}
		if !TryAllowed(ctx) {
			return gated(log, n, res)
		}
	}
}

// ended logs a call that ended after tries tries on a failure of the
// host's side, and returns its result.
func ended(log zerolog.Logger, tries int, res *Result) *Result {
	if hostFailure(res) {
		// The code only: the message may quote the remote's answer.
		log.Warn().Int("tries", tries).Str("code", res.Err.Code).Str("outcome", res.Outcome).Msg("webhook call failed")
	}
	return res
}

// gated ends a call whose try gate refused the next try.
func gated(log zerolog.Logger, tries int, res *Result) *Result {
	log.Info().Int("tries", tries).Msg("webhook call stops retrying: its try gate refused (circuit open)")
	return ended(log, tries, res)
}

// send makes one try, bounded by the spec's per-try timeout.
func (w *webhookRunner) send(ctx context.Context, body []byte, hdr http.Header) tryResult {
	tctx, cancel := context.WithTimeout(ctx, w.spec.Timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(tctx, http.MethodPost, w.spec.URL, bytes.NewReader(body))
	if err != nil {
		return tryResult{kind: tryNeverLeft, err: err, retryAfter: -1}
	}
	hreq.Header = hdr.Clone()
	// Without GetBody the transport cannot replay the request by itself on
	// a reused connection, so every try on the wire is one counted here.
	hreq.GetBody = nil
	resp, err := w.client.Do(hreq)
	if err != nil {
		return classify(ctx, err, w.spec.Timeout, RedactURL(w.spec.URL))
	}
	defer resp.Body.Close()
	t := tryResult{status: resp.StatusCode, retryAfter: -1}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		b, err := io.ReadAll(io.LimitReader(resp.Body, w.spec.MaxPayload+1))
		if err != nil {
			// The server answered 2xx and the body was cut: it may well
			// have applied the write.
			return classify(ctx, err, w.spec.Timeout, RedactURL(w.spec.URL))
		}
		t.kind, t.body = tryAnswered, b
		if int64(len(b)) > w.spec.MaxPayload {
			t.kind = tryTooLarge
		}
		return t
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		t.kind = tryRetryStatus
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			t.retryAfter = d
		}
	default:
		t.kind = tryRejected
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	return t
}

// answer reads a 2xx body: a protocol response is judged like a process
// handler's; anything else means the write was applied, and the body is the
// output, as JSON when it is JSON and as a JSON string otherwise.
func answer(req *Request, body []byte) *Result {
	if isResponse(body) {
		return interpret(req, body)
	}
	var out bytes.Buffer
	if err := json.Compact(&out, body); err != nil || out.Len() == 0 {
		s, _ := json.Marshal(string(body))
		out.Reset()
		out.Write(s)
	}
	res := &Result{OK: true, Output: out.Bytes(), Dispatched: true}
	if req.Context.Effect != nil {
		res.Outcome = touba.EffectApplied
	}
	return cleanAnswer(res)
}
