package handler

import "encoding/json"

// Protocol is the only handler protocol this SDK speaks (SPEC §4).
const Protocol = "touba-tool-handler-v1"

// ModeEnv is the environment variable the host sets to "persistent" when it
// starts one long-lived process for many calls (SPEC §4.1).
const ModeEnv = "TOUBA_HANDLER_MODE"

// Error codes the SDK answers with on its own, before or around the tool's
// Run. Codes a Run returns through an *Error are passed through unchanged.
const (
	// CodeProtocolError answers a request that is not a well-formed
	// touba-tool-handler-v1 request.
	CodeProtocolError = "HandlerProtocolError"
	// CodeToolRefMismatch answers a request for another tool than this one.
	CodeToolRefMismatch = "ToolRefMismatch"
	// CodeGrantMissing answers a request whose context.grants lacks one of
	// the tool's RequiredGrants; Run is not called.
	CodeGrantMissing = "GrantMissing"
	// CodePanic answers a call whose Run panicked.
	CodePanic = "HandlerPanic"
	// CodeFailed answers a call whose Run returned a plain error (not an
	// *Error) or an output that cannot be encoded as JSON.
	CodeFailed = "HandlerFailed"
)

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

// The outcomes an effect receipt may state. Use Unknown when the write may
// have happened (for example the commit's answer was lost).
const (
	Applied    Outcome = "applied"
	NotApplied Outcome = "not_applied"
	Unknown    Outcome = "unknown"
)

func (o Outcome) valid() bool {
	return o == Applied || o == NotApplied || o == Unknown
}

// wireRequest is the request document as the host sends it.
type wireRequest struct {
	Protocol  string          `json:"protocol"`
	Operation Operation       `json:"operation"`
	ToolRef   string          `json:"tool_ref"`
	Input     json.RawMessage `json:"input"`
	Context   wireContext     `json:"context"`
}

type wireContext struct {
	TriggerRef     string      `json:"trigger_ref"`
	EventID        string      `json:"event_id"`
	QueueID        string      `json:"queue_id"`
	RunID          string      `json:"run_id"`
	CallID         string      `json:"call_id"`
	Attempt        int         `json:"attempt"`
	DeadlineUnixMS int64       `json:"deadline_unix_ms"`
	Grants         []string    `json:"grants"`
	TraceParent    string      `json:"traceparent"`
	Effect         *wireEffect `json:"effect"`
}

type wireEffect struct {
	Scope       string `json:"scope"`
	EffectID    string `json:"effect_id"`
	Fingerprint string `json:"fingerprint"`
	RetryMode   string `json:"retry_mode"`
	Attempt     int    `json:"attempt"`
}

// wireResponse is the response document. CallID is set in persistent mode
// only, where answers may come in any order.
type wireResponse struct {
	CallID        *string         `json:"call_id,omitempty"`
	OK            bool            `json:"ok"`
	Output        json.RawMessage `json:"output,omitempty"`
	EffectReceipt *wireReceipt    `json:"effect_receipt,omitempty"`
	Error         *wireError      `json:"error,omitempty"`
}

type wireReceipt struct {
	EffectID    string  `json:"effect_id"`
	Fingerprint string  `json:"fingerprint"`
	Outcome     Outcome `json:"outcome"`
	ReceiptRef  string  `json:"receipt_ref,omitempty"`
}

type wireError struct {
	Code    string                     `json:"code"`
	Message string                     `json:"message"`
	Details map[string]json.RawMessage `json:"details,omitempty"`
}
