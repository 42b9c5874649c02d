// Package protocol holds the wire types of touba-tool-handler-v1 (SPEC §4):
// the request a handler reads, the response it writes, and their parts.
// The daemon's runners (handler/) and the Go SDK (sdk/handler) both use
// these types, so the two ends cannot drift apart. It imports only the
// standard library: the SDK must not link anything else of the daemon.
package protocol

import "encoding/json"

// Name is the value of a request's "protocol" field.
const Name = "touba-tool-handler-v1"

// Header is the HTTP response header that marks a webhook answer as a
// protocol response (SPEC §2.2, §4.2): the SDKs' HTTP serving sets it to
// Name, and the daemon reads a 2xx body as a response only when it is there,
// never by the body's shape.
const Header = "Touba-Protocol"

// ModeEnv is the environment variable the host sets to ModePersistent when
// it starts one long-lived process for many calls (SPEC §4.1).
const ModeEnv = "TOUBA_HANDLER_MODE"

// ModePersistent is ModeEnv's value for a persistent handler process.
const ModePersistent = "persistent"

// Operation says whether a call is a normal call or an explicit
// compensation of an earlier effect.
type Operation string

// The operations of the protocol.
const (
	Invoke     Operation = "invoke"
	Compensate Operation = "compensate"
)

// Outcome is what a handler knows about its external write.
type Outcome string

// The outcomes an effect receipt may state. Unknown is for a write that may
// have happened (for example the commit's answer was lost).
const (
	Applied    Outcome = "applied"
	NotApplied Outcome = "not_applied"
	Unknown    Outcome = "unknown"
)

// Valid reports whether o is one of the three outcomes.
func (o Outcome) Valid() bool {
	return o == Applied || o == NotApplied || o == Unknown
}

// Request is one protocol request: the stdin of a process handler (one
// line of it for a persistent one), the body of a webhook handler.
type Request struct {
	Protocol  string          `json:"protocol"`
	Operation Operation       `json:"operation"`
	ToolRef   string          `json:"tool_ref"`
	Input     json.RawMessage `json:"input"`
	Context   Context         `json:"context"`
}

// Context tells the handler which run and attempt a request belongs to.
type Context struct {
	TriggerRef     string   `json:"trigger_ref"`
	EventID        string   `json:"event_id"`
	QueueID        string   `json:"queue_id"`
	RunID          string   `json:"run_id"`
	CallID         string   `json:"call_id"`
	Attempt        int      `json:"attempt"`
	DeadlineUnixMS int64    `json:"deadline_unix_ms"`
	Grants         []string `json:"grants"`
	// TraceParent is the W3C traceparent of the touba.handler.call span, so
	// the handler's own spans join the delivery's trace; absent with
	// tracing off. A webhook handler also gets it as the traceparent header.
	TraceParent string  `json:"traceparent,omitempty"`
	Effect      *Effect `json:"effect,omitempty"`
}

// Effect identifies the external write of a call; it is present only for
// bindings whose effect contract is external_write.
type Effect struct {
	Scope       string `json:"scope"`
	EffectID    string `json:"effect_id"`
	Fingerprint string `json:"fingerprint"`
	RetryMode   string `json:"retry_mode"`
	Attempt     int    `json:"attempt"`
}

// Response is one protocol response document. CallID is a pointer because a
// persistent handler's answers may come in any order and each must carry
// its request's call_id, even an empty one, while a process-per-call
// answer carries none.
type Response struct {
	CallID        *string         `json:"call_id,omitempty"`
	OK            bool            `json:"ok"`
	Output        json.RawMessage `json:"output,omitempty"`
	EffectReceipt *Receipt        `json:"effect_receipt,omitempty"`
	Error         *ErrorBody      `json:"error,omitempty"`
}

// ErrorBody is the error of a response with ok false. Details may hold
// {"effect_receipt": {...}}.
type ErrorBody struct {
	Code    string                     `json:"code"`
	Message string                     `json:"message"`
	Details map[string]json.RawMessage `json:"details,omitempty"`
}

// Receipt is a handler's statement about one effect.
type Receipt struct {
	EffectID    string  `json:"effect_id"`
	Fingerprint string  `json:"fingerprint"`
	Outcome     Outcome `json:"outcome"`
	ReceiptRef  string  `json:"receipt_ref,omitempty"`
}
