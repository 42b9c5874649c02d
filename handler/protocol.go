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
	"io"
	"net"
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
	b, err := encodeRequestBody(req, deadline)
	if err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// requestBody is an encoded request in pieces, in order: what a runner
// writes or sends, never joined into one copy (issue 43: a gathering's
// /events makes inputs of tens of MiB, and the request held them twice).
type requestBody [][]byte

// Len is the request's size in bytes.
func (b requestBody) Len() int {
	n := 0
	for _, p := range b {
		n += len(p)
	}
	return n
}

// Bytes joins the pieces.
func (b requestBody) Bytes() []byte { return bytes.Join(b, nil) }

// WriteTo writes the pieces to w, in order.
func (b requestBody) WriteTo(w io.Writer) (int64, error) {
	bufs := net.Buffers(append([][]byte(nil), b...))
	return bufs.WriteTo(w)
}

// Reader reads the pieces in order.
func (b requestBody) Reader() io.Reader {
	rs := make([]io.Reader, len(b))
	for i, p := range b {
		rs[i] = bytes.NewReader(p)
	}
	return io.MultiReader(rs...)
}

// encodeRequestBody is encodeRequest in pieces: the envelope's members
// before the input, the input, and the rest. The bytes are a
// json.Encoder's without HTML escaping (members in the struct's order, the
// input compacted), but the input is not copied when it is compact
// already, as the dispatcher's inputs are (canonical), and the envelope is
// small.
func encodeRequestBody(req *Request, deadline time.Time) (requestBody, error) {
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
	head, err := marshalNoHTML(struct {
		Protocol  string             `json:"protocol"`
		Operation protocol.Operation `json:"operation"`
		ToolRef   string             `json:"tool_ref"`
	}{r.Protocol, r.Operation, r.ToolRef})
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	ctxJSON, err := marshalNoHTML(r.Context)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	input := []byte(r.Input)
	if !compactJSON(input) {
		var buf bytes.Buffer
		if err := json.Compact(&buf, input); err != nil {
			return nil, fmt.Errorf("encode request: json: error calling MarshalJSON for type json.RawMessage: %w", err)
		}
		input = buf.Bytes()
	}
	head = append(head[:len(head)-1], `,"input":`...)
	tail := make([]byte, 0, len(ctxJSON)+13)
	tail = append(append(append(tail, `,"context":`...), ctxJSON...), "}\n"...)
	return requestBody{head, input, tail}, nil
}

// compactJSON tells whether b is one JSON value without insignificant
// white space: what json.Compact would give back unchanged.
func compactJSON(b []byte) bool {
	if !json.Valid(b) {
		return false
	}
	in := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case in && c == '\\':
			i++
		case in && c == '"':
			in = false
		case in:
		case c == '"':
			in = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			return false
		}
	}
	return true
}

// marshalNoHTML is json.Marshal without HTML escaping, as an Encoder with
// SetEscapeHTML(false) writes it, without the newline.
func marshalNoHTML(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
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
