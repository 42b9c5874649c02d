// Package handler speaks the touba-tool-handler-v1 protocol (SPEC §4): the
// request and response documents, the canonical JSON behind effect
// fingerprints, the rules that decide whether an effect receipt is valid,
// and the runners that call a tool binding's handler: a local process, an
// outbound signed webhook, any HTTP API (the http kind: one client with the
// webhook, behind the egress guard of handler/egress), or the in-process
// accounting stub.
//
// A runner never writes the effect journal. It tells its caller the moment
// before a request leaves (the dispatched hook), and reports what came back
// as a Result whose Outcome is what the journal should record.
package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/protocol"
)

// GrantNetwork is the grant that lets a process handler use the network.
const GrantNetwork = "network"

// DefaultMaxPayload bounds inputs and outputs when a spec names no limit.
const DefaultMaxPayload = 1 << 20

// The wire documents a runner sends and reads are package protocol's,
// shared with the Go SDK; the names stay here for the runners' callers.
type (
	Request = protocol.Request
	Context = protocol.Context
	Effect  = protocol.Effect
	Receipt = protocol.Receipt
)

// Result is what one call produced, as the dispatcher needs it.
type Result struct {
	// OK is true when the handler answered ok and, for a call with an
	// effect, with a valid receipt.
	OK bool
	// Output is the handler's output (JSON). For a webhook 2xx that is not a
	// protocol response it is the body as JSON, or the body as a JSON string.
	Output json.RawMessage
	// Outcome is applied, not_applied or unknown for a call with
	// Context.Effect, and "" otherwise.
	Outcome    string
	ReceiptRef string
	// ReceiptErrorCode is EffectReceiptMissing, EffectReceiptMismatch or
	// EffectReceiptInvalid when a handler's answer held no valid receipt.
	ReceiptErrorCode string
	// Err is nil when OK. A business error keeps its own code even when its
	// receipt is missing or invalid.
	Err *touba.Error
	// Dispatched reports whether the dispatched hook ran, so the request
	// may have left.
	Dispatched bool
	// Detail is a few words for the journal's outcome event: the HTTP
	// status an answer of an HTTP kind came with ("http_status=422").
	Detail string
}

// Runner calls one tool binding's handler.
type Runner interface {
	// Call runs one request. dispatched is called exactly once, just before
	// the request is sent (written to stdin, or the HTTP request started);
	// if it returns an error the request is not sent and the Result is
	// not_applied with that error. Call never panics on bad handler output.
	Call(ctx context.Context, req *Request, dispatched func() error) *Result
	// Close releases the runner; later calls fail without being sent.
	Close() error
}

// encodeRequest renders req as compact JSON ending in a newline (one line,
// as persistent handlers read it). It fills the defaults a handler may rely
// on: the protocol name, grants as [] rather than null, a null input, and a
// deadline when the caller set none.
func encodeRequest(req *Request, deadline time.Time) ([]byte, error) {
	r := *req
	if r.Protocol == "" {
		r.Protocol = protocol.Name
	}
	if r.Operation == "" {
		r.Operation = protocol.Invoke
	}
	if len(r.Input) == 0 {
		r.Input = json.RawMessage("null")
	}
	if r.Context.Grants == nil {
		r.Context.Grants = []string{}
	}
	if r.Context.DeadlineUnixMS == 0 && !deadline.IsZero() {
		r.Context.DeadlineUnixMS = deadline.UnixMilli()
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&r); err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return buf.Bytes(), nil
}

// callDeadline is the earlier of ctx's deadline and now+timeout (zero when
// neither bounds the call).
func callDeadline(ctx context.Context, timeout time.Duration) time.Time {
	d, ok := ctx.Deadline()
	if timeout > 0 {
		if t := time.Now().Add(timeout); !ok || t.Before(d) {
			return t
		}
	}
	if ok {
		return d
	}
	return time.Time{}
}

// effectID is the identity a call's receipt must name: the effect's id, or
// the call id for a call without an effect.
func effectID(req *Request) string {
	if req.Context.Effect != nil {
		return req.Context.Effect.EffectID
	}
	return req.Context.CallID
}

// fail builds the Result of a call that produced no usable answer. The
// outcome is dropped for a call without an effect.
func fail(req *Request, outcome string, dispatched bool, err *touba.Error) *Result {
	r := &Result{Err: err, Dispatched: dispatched}
	if req.Context.Effect != nil {
		r.Outcome = outcome
	}
	return r
}

// hookError turns the dispatched hook's error into the Result's error.
func hookError(err error) *touba.Error {
	var e *touba.Error
	if errors.As(err, &e) {
		return e
	}
	return touba.Errorf(touba.ErrorCode(err), "dispatch: %v", err)
}

// refuseUnsent is the Result of a call that is not sent because the runner
// is closed or the input is over maxPayload, or nil when it may go on.
func refuseUnsent(req *Request, closed bool, maxPayload int64) *Result {
	if closed {
		return fail(req, touba.EffectNotApplied, false, touba.Errorf(touba.EHandlerFailed, "handler runner is closed"))
	}
	if n := int64(len(req.Input)); maxPayload > 0 && n > maxPayload {
		return fail(req, touba.EffectNotApplied, false, touba.Errorf(touba.EHandlerPayloadTooLarge,
			"input of %d bytes is over max_payload_bytes %d", n, maxPayload))
	}
	return nil
}

// orDefault sets *v to def when it is the zero value: a spec's unset limit.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
