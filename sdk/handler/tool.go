package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"
)

// Tool defines one handler: the tool it implements, the grants it needs and
// the function that runs each call.
type Tool struct {
	// Ref is the tool reference this handler implements, such as
	// "tool:examples.orders/CreateOrder". A request for any other tool is
	// answered with ToolRefMismatch.
	Ref string
	// RequiredGrants are the grants the binding must give (context.grants).
	// A call that lacks one is answered with GrantMissing and Run is not called.
	RequiredGrants []string
	// Run performs one call. Return an *Error for a business error with a
	// public code; any other error is answered as HandlerFailed with a
	// generic message, its text going to ErrorLog only. Run may be called
	// concurrently in persistent mode.
	Run func(ctx context.Context, c *Call) (*Result, error)
	// ErrorLog receives diagnostics that must not reach the response (panic
	// stacks, internal error texts). Nil means the standard logger, which
	// writes to stderr.
	ErrorLog *log.Logger
}

func (t *Tool) validate() error {
	if t.Ref == "" {
		return errors.New("handler: tool has no Ref")
	}
	if t.Run == nil {
		return errors.New("handler: tool has no Run")
	}
	return nil
}

func (t *Tool) logf(format string, args ...any) {
	if t.ErrorLog != nil {
		t.ErrorLog.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// Call is one request to the tool, as Run sees it.
type Call struct {
	// Operation is Invoke for a normal call or Compensate for an explicit
	// compensation; the SDK passes it through and Run decides what it means.
	Operation Operation
	// ToolRef is the requested tool (always the tool's own Ref in Run).
	ToolRef string
	// Input is the raw JSON input object; see Decode.
	Input json.RawMessage
	// Context is the request context sent by the host.
	Context RequestContext

	// effect is private so that neither Run nor anyone else can change the
	// identity a receipt is bound to.
	effect *Effect
}

// RequestContext identifies the event, run and attempt a call belongs to.
type RequestContext struct {
	TriggerRef string
	EventID    string
	QueueID    string
	RunID      string
	// CallID names this handler attempt; it is unique per call.
	CallID  string
	Attempt int
	// Deadline is when the host gives up on the call; zero if none was sent.
	// The ctx passed to Run carries the same deadline.
	Deadline time.Time
	// Grants are the grants of the binding.
	Grants []string
	// TraceParent is the W3C trace context (traceparent header value) of
	// the host's handler-call span, "" when the host does not trace. Pass it
	// on (to your own spans, or as a traceparent header) to join the
	// delivery's trace.
	TraceParent string
	// IdempotencyKey is the Idempotency-Key header of a call served by
	// HTTPHandler, "" for a process handler. HTTPHandler refuses a header
	// that is not the signed body's effect_id (or call_id without an
	// effect), so deduplicating on it or on Effect().EffectID is the same;
	// EffectID works in both forms.
	IdempotencyKey string
}

// Effect identifies the logical external write of an external_write
// binding. Send EffectID to the remote service as its idempotency key.
type Effect struct {
	Scope       string
	EffectID    string
	Fingerprint string
	RetryMode   string
	Attempt     int
}

// Effect returns a copy of the call's effect, or nil when the binding
// declares no external write. Changing the copy changes nothing: receipts
// are bound to the effect the host sent.
func (c *Call) Effect() *Effect {
	if c.effect == nil {
		return nil
	}
	e := *c.effect
	return &e
}

// Decode unmarshals the call's input into v. An absent input decodes as
// JSON null.
func (c *Call) Decode(v any) error {
	in := c.Input
	if len(in) == 0 {
		in = json.RawMessage("null")
	}
	if err := json.Unmarshal(in, v); err != nil {
		return fmt.Errorf("decode input: %w", err)
	}
	return nil
}

// Result is the successful answer of a call: its output and, for an
// external write, the receipt of the effect.
type Result struct {
	output  any
	receipt *Receipt
}

// Output returns a Result whose output is v encoded as JSON.
func Output(v any) *Result {
	return &Result{output: v}
}

// WithReceipt attaches an effect receipt made by Call.Receipt and returns r.
// A nil receipt attaches nothing.
func (r *Result) WithReceipt(rc *Receipt) *Result {
	r.receipt = rc
	return r
}
