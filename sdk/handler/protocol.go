package handler

import "github.com/touba/touba-trigger/protocol"

// Protocol is the only handler protocol this SDK speaks (SPEC §4).
const Protocol = protocol.Name

// ModeEnv is the environment variable the host sets to "persistent" when it
// starts one long-lived process for many calls (SPEC §4.1).
const ModeEnv = protocol.ModeEnv

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
type Operation = protocol.Operation

// The operations of the protocol.
const (
	Invoke     = protocol.Invoke
	Compensate = protocol.Compensate
)

// Outcome is what a handler knows about its external write.
type Outcome = protocol.Outcome

// The outcomes an effect receipt may state. Use Unknown when the write may
// have happened (for example the commit's answer was lost).
const (
	Applied    = protocol.Applied
	NotApplied = protocol.NotApplied
	Unknown    = protocol.Unknown
)
