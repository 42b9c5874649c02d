package handler

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/rs/zerolog"
	touba "github.com/touba/touba-trigger"
)

// The HTTP kinds (webhook, http) share one client: this try loop, the
// outcome rules by retry_mode (outbound_try.go) and the egress-guarded
// transport (client.go). A wire is what differs between them: how a call's
// request is built and how a 2xx answer is read.

// Defaults of the HTTP kinds' tries.
const (
	DefaultWebhookTimeout  = 30 * time.Second
	DefaultMaxTries        = 6 // the first try and 5 retries (SPEC §2.2)
	DefaultInitialInterval = 500 * time.Millisecond
	DefaultMaxInterval     = 30 * time.Second
)

// drainLimit bounds how much of an unused response body is read so the
// connection can be reused.
const drainLimit = 64 << 10

// wire is one HTTP kind's way of speaking.
type wire interface {
	// request is what a call sends, the same on each of its tries; an
	// error refuses the call unsent. With shown set it is for Describe:
	// what the description does not show (a webhook's body and signature)
	// may be left out.
	request(req *Request, deadline time.Time, shown bool) (*outRequest, *touba.Error)
	// answer reads a 2xx answer.
	answer(req *Request, t tryResult) *Result
}

// outRequest is one call's HTTP request.
type outRequest struct {
	method, url string
	header      http.Header
	body        []byte      // nil: none
	parts       requestBody // the body in pieces (a webhook's request), sent in order; nil: body
	label       string      // names the call in messages: "webhook", "http PUT"
	// masked says what Describe shows instead of a header's value (the
	// name of the secret it holds); canonical header names.
	masked map[string]string
}

// Limits bound the calls of an HTTP kind (WebhookSpec, HTTPSpec); a zero
// field takes its default.
type Limits struct {
	Timeout    time.Duration // per try; 0 means DefaultWebhookTimeout
	MaxPayload int64         // bounds the input and the response body; 0 means DefaultMaxPayload
	MaxTries   int           // tries within one call; 0 means DefaultMaxTries
	// InitialInterval and MaxInterval shape the exponential backoff between
	// tries; MaxInterval also caps a server's Retry-After.
	InitialInterval, MaxInterval time.Duration
}

// limits are a runner's Limits, defaulted, and its kind's rules.
type limits struct {
	Limits
	// rejectCode is the code of a 4xx answer; conflictRetried makes a 409
	// under idempotency_key retried like a 5xx (the remote is still busy
	// with the same key).
	rejectCode      string
	conflictRetried bool
}

// newLimits checks and defaults a spec's limits.
func newLimits(kind string, l Limits) (limits, error) {
	if l.Timeout < 0 || l.MaxPayload < 0 || l.MaxTries < 0 || l.InitialInterval < 0 || l.MaxInterval < 0 {
		return limits{}, touba.Errorf(touba.ECONFIG, "%s handler: negative timeout, limit or interval", kind)
	}
	orDefault(&l.Timeout, DefaultWebhookTimeout)
	orDefault(&l.MaxPayload, DefaultMaxPayload)
	orDefault(&l.MaxTries, DefaultMaxTries)
	orDefault(&l.InitialInterval, DefaultInitialInterval)
	orDefault(&l.MaxInterval, DefaultMaxInterval)
	l.MaxInterval = max(l.MaxInterval, l.InitialInterval)
	return limits{Limits: l}, nil
}

// outbound is a Runner of an HTTP kind.
type outbound struct {
	limits
	wire      wire
	client    *http.Client
	ownClient bool
	log       zerolog.Logger
	closed    atomic.Bool
}

// Close makes later calls fail without being sent.
func (o *outbound) Close() error {
	if !o.closed.Swap(true) && o.ownClient {
		o.client.CloseIdleConnections()
	}
	return nil
}

// Call sends req's request, retrying as SPEC §2.2 says while ctx's try
// gate allows (WithTryGate). See Runner.
func (o *outbound) Call(ctx context.Context, req *Request, dispatched func() error) *Result {
	log := o.log.With().Str("call_id", req.Context.CallID).Str("tool_ref", req.ToolRef).Logger()
	if res := refuseUnsent(req, o.closed.Load(), o.MaxPayload); res != nil {
		return res
	}
	out, terr := o.wire.request(req, callDeadline(ctx, 0), false)
	if terr != nil {
		return fail(req, touba.EffectNotApplied, false, terr)
	}
	if err := context.Cause(ctx); err != nil {
		return fail(req, touba.EffectNotApplied, false, touba.Errorf(touba.EHandlerTimeout, "call cancelled before sending: %v", err))
	}
	if tp := req.Context.TraceParent; tp != "" {
		out.header.Set("Traceparent", tp) // W3C trace context: the remote service joins the trace
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
	keyed := req.Context.Effect != nil && req.Context.Effect.RetryMode == touba.RetryIdempotencyKey
	repeatable := req.Context.Effect == nil || keyed
	retry409 := o.conflictRetried && keyed
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = o.InitialInterval, o.MaxInterval, 0
	bo.Reset()
	maybeSent := false
	for n := 1; ; n++ {
		t := o.send(ctx, out, retry409)
		t.err = redactError(t.err, out.url) // before anything shows it
		log.Debug().Int("try", n).Int("status", t.status).Err(t.err).Msg(out.label + " try")
		res, final := t.result(req, o, out, maybeSent)
		maybeSent = maybeSent || t.kind != tryNeverLeft && t.kind != tryForbidden
		if final || !repeatable && !t.neverApplied() || n >= o.MaxTries || ctx.Err() != nil {
			return ended(log, out.label, n, res)
		}
		if res.Err != nil && (res.Err.Code == touba.EHandlerFailed || res.Err.Code == touba.EHandlerTimeout) {
			tryFailed(ctx) // what a circuit counts as a failure (dispatcher.failed)
		}
		// A circuit that opened while the call was in flight sends no
		// further try (SPEC §2.2): asked before the wait and again right
		// before sending, the call ends with this try's result, as if
		// the retry budget ran out here.
		if !TryAllowed(ctx) {
			return gated(log, out.label, n, res)
		}
		wait := bo.NextBackOff()
		if t.retryAfter >= 0 {
			wait = min(t.retryAfter, o.MaxInterval)
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return res
		}
		if !TryAllowed(ctx) {
			return gated(log, out.label, n, res)
		}
	}
}

// ended logs a call that ended after tries tries on a failure of the
// host's side, and returns its result.
func ended(log zerolog.Logger, label string, tries int, res *Result) *Result {
	if hostFailure(res) {
		// The code only: the message may quote the remote's answer.
		log.Warn().Int("tries", tries).Str("code", res.Err.Code).Str("outcome", res.Outcome).Msg(label + " call failed")
	}
	return res
}

// gated ends a call whose try gate refused the next try.
func gated(log zerolog.Logger, label string, tries int, res *Result) *Result {
	log.Info().Int("tries", tries).Msg(label + " call stops retrying: its try gate refused (circuit open)")
	return ended(log, label, tries, res)
}

// send makes one try, bounded by the per-try timeout. retry409 makes a 409
// a status to retry.
func (o *outbound) send(ctx context.Context, out *outRequest, retry409 bool) tryResult {
	tctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	var body io.Reader
	switch {
	case out.parts != nil:
		body = out.parts.Reader()
	case out.body != nil:
		body = bytes.NewReader(out.body)
	}
	hreq, err := http.NewRequestWithContext(tctx, out.method, out.url, body)
	if err != nil {
		return tryResult{kind: tryNeverLeft, err: err, retryAfter: -1}
	}
	if out.parts != nil {
		hreq.ContentLength = int64(out.parts.Len())
	}
	hreq.Header = out.header.Clone()
	// Without GetBody the transport cannot replay the request by itself on
	// a reused connection, so every try on the wire is one counted here.
	hreq.GetBody = nil
	// The transport writes a request only on a connection it got: until
	// GotConn, whatever failed (the dial, a proxy's refusal of the
	// connection or of the CONNECT, the TLS handshake) failed before the
	// request left.
	var connected, reused atomic.Bool
	hreq = hreq.WithContext(httptrace.WithClientTrace(tctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { reused.Store(i.Reused); connected.Store(true) },
	}))
	resp, err := o.client.Do(hreq)
	if err != nil {
		t := classify(ctx, err, o.Timeout, out.label+" "+RedactURL(out.url), connected.Load())
		if t.kind == tryLost && !reused.Load() && handshakeRefused(err) {
			t.kind = tryNeverLeft
		}
		return t
	}
	defer resp.Body.Close()
	t := tryResult{status: resp.StatusCode, retryAfter: -1}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		b, err := io.ReadAll(io.LimitReader(resp.Body, o.MaxPayload+1))
		if err != nil {
			// The server answered 2xx and the body was cut: it may well
			// have applied the write.
			return classify(ctx, err, o.Timeout, out.label+" "+RedactURL(out.url), true)
		}
		t.kind, t.body, t.header = tryAnswered, b, resp.Header
		if int64(len(b)) > o.MaxPayload {
			t.kind = tryTooLarge
		}
		return t
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 ||
		retry409 && resp.StatusCode == http.StatusConflict:
		t.kind = tryRetryStatus
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			t.retryAfter = d
		}
	default:
		t.kind = tryRejected
		// The start of a refusal's body may name the receiver's own
		// reason (receiverError): kept for the error message.
		t.body, _ = io.ReadAll(io.LimitReader(resp.Body, rejectionPeek))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	return t
}
