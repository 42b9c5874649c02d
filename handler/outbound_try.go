package handler

import (
	"context"
	"crypto/tls"
	"errors"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler/egress"
)

// tryKind is what one try of an HTTP kind came to.
type tryKind int

const (
	tryAnswered    tryKind = iota // a 2xx with its body
	tryTooLarge                   // a 2xx whose body is over the limit
	tryRejected                   // any other status but 429 and 5xx
	tryRetryStatus                // 429 or 5xx
	tryNeverLeft                  // certainly not sent: dial, DNS or certificate failure
	tryForbidden                  // refused by the egress guard: never sent, and never to be
	tryTimeout                    // no answer in time, or the call was cancelled
	tryLost                       // the connection broke after the request may have been sent
)

// tryResult is one try's result.
type tryResult struct {
	kind       tryKind
	status     int
	body       []byte
	header     http.Header // of a 2xx answer
	err        error
	retryAfter time.Duration // < 0 when the server sent none
}

// neverApplied tells whether the remote certainly did not apply this try:
// it never left, or the remote answered 429. Only such a try may be sent
// again for a binding whose remote does not deduplicate.
func (t tryResult) neverApplied() bool {
	return t.kind == tryNeverLeft || t.kind == tryRetryStatus && t.status == http.StatusTooManyRequests
}

// result is the call's Result if this try were the last, and whether it is
// final whatever the retry budget says. earlier tells whether an earlier
// try may have reached the server: then an answer that would otherwise mean
// "not applied" cannot rule out that one's application.
func (t tryResult) result(req *Request, o *outbound, out *outRequest, earlier bool) (*Result, bool) {
	res, final := t.judge(req, o, out, earlier)
	if t.status != 0 {
		// The status, for the journal's outcome event (the error's details).
		res.Detail = "http_status=" + strconv.Itoa(t.status)
	}
	return res, final
}

func (t tryResult) judge(req *Request, o *outbound, out *outRequest, earlier bool) (*Result, bool) {
	// Where it went, without the path or query that may be a secret.
	at := out.label + " " + RedactURL(out.url)
	notApplied := touba.EffectNotApplied
	if earlier {
		notApplied = touba.EffectUnknown
	}
	switch t.kind {
	case tryAnswered:
		return o.wire.answer(req, t), true
	case tryTooLarge:
		return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerPayloadTooLarge,
			"%s answered %d with a body over max_payload_bytes %d", at, t.status, o.MaxPayload)), true
	case tryRejected:
		// Only a 4xx says the write was refused (SPEC §2.2). A 1xx or 3xx
		// (a "303 See Other" after creating, say) says nothing of it.
		if t.status < 400 || t.status > 499 {
			return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerFailed,
				"%s answered %d %s, which says neither applied nor refused", at, t.status, http.StatusText(t.status))), true
		}
		return fail(req, notApplied, true, touba.Errorf(o.rejectCode,
			"%s answered %d %s%s", at, t.status, http.StatusText(t.status), receiverError(t.body))), true
	case tryRetryStatus:
		return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerFailed,
			"%s answered %d %s", at, t.status, http.StatusText(t.status))), false
	case tryForbidden:
		return fail(req, notApplied, true, touba.Errorf(touba.EEgressForbidden, "%s not sent: %v", at, t.err)), true
	case tryNeverLeft:
		return fail(req, notApplied, true, touba.Errorf(touba.EHandlerFailed, "%s unreachable: %v", out.label, t.err)), false
	case tryTimeout:
		return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerTimeout, "%v", t.err)), false
	default:
		return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerFailed, "%s connection lost: %v", out.label, t.err)), false
	}
}

// classify sorts a transport error (at is the redacted URL): was the
// request certainly never sent, did the try run out of time, or did the
// connection break? connected tells whether the transport got a connection
// for the request: without one, nothing was written, whatever the error
// (a dial refused, wrapped "proxyconnect" when it was the proxy's; a
// proxy's refused CONNECT; a TLS handshake the server refused, which Go
// reports before the request is written in TLS 1.2, and in TLS 1.3 only
// when the server refuses in its first flight).
func classify(ctx context.Context, err error, timeout time.Duration, at string, connected bool) tryResult {
	t := tryResult{err: err, retryAfter: -1}
	var op *net.OpError
	var dns *net.DNSError
	var cert *tls.CertificateVerificationError
	var forbidden *egress.ForbiddenError
	switch {
	case errors.As(err, &forbidden):
		t.kind, t.err = tryForbidden, forbidden
	case !connected, errors.As(err, &op) && op.Op == "dial", errors.As(err, &dns), errors.As(err, &cert):
		t.kind = tryNeverLeft
	case ctx.Err() != nil:
		t.kind, t.err = tryTimeout, errors.New("call cancelled while "+at+" was answering: "+context.Cause(ctx).Error())
	case isTimeout(err):
		t.kind, t.err = tryTimeout, errors.New(at+" did not answer within "+timeout.String())
	default:
		t.kind = tryLost
	}
	return t
}

// handshakeRefused tells a TLS alert the server sent about the client's
// certificate: under TLS 1.3 the client's side of the handshake ends
// before the server checks the certificate, so the request is written
// and the refusal comes as the answer's first read. The server's side of
// the handshake never completed, and TLS hands a server's application no
// byte before it completes (RFC 8446 §4.4.4; Go's client offers no
// post-handshake authentication): on a new connection the request was
// read by no one, so the call is not_applied, as under TLS 1.2.
func handshakeRefused(err error) bool {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" || op.Err == nil {
		return false
	}
	switch op.Err.Error() {
	case "tls: certificate required", "tls: bad certificate", "tls: unknown certificate authority",
		"tls: access denied", "tls: certificate expired", "tls: certificate revoked",
		"tls: unsupported certificate", "tls: handshake failure":
		return true
	}
	return false
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// parseRetryAfter reads a Retry-After value: delay seconds or an HTTP-date
// (RFC 9110 §10.2.3). A date in the past means no wait.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if strings.Trim(v, "0123456789") == "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > math.MaxInt64/int64(time.Second) {
			return time.Duration(math.MaxInt64), true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}
