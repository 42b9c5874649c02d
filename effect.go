package touba

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Operations of an effect (SPEC §4): a normal call, or an operator's
// compensation of an applied effect.
const (
	OperationInvoke     = "invoke"
	OperationCompensate = "compensate"
)

// Sentinels of the effect journal, matched with errors.Is.
var (
	// ErrEffectApplied: the effect is applied and can never be rewritten.
	ErrEffectApplied = errors.New("effect already applied")
	// ErrTransition: the journal's state machine does not allow the change.
	ErrTransition = errors.New("effect transition not allowed")
	// ErrNotCompensable: only an applied effect can be compensated.
	ErrNotCompensable = errors.New("only an applied effect can be compensated")
)

// CompensationID names the compensation of effectID: a distinct effect in
// the same journal (SPEC §5).
func CompensationID(effectID string) string { return effectID + ":compensate" }

// IsCompensation reports whether effectID names a compensation, and of
// which effect.
func IsCompensation(effectID string) (original string, ok bool) {
	return strings.CutSuffix(effectID, ":compensate")
}

// Effect is one row of the effect journal (SPEC §5).
type Effect struct {
	Scope            string          `json:"scope"`
	EffectID         string          `json:"effect_id"`
	ToolRef          string          `json:"tool_ref"`
	Operation        string          `json:"operation"`
	Fingerprint      string          `json:"fingerprint"`
	RetryMode        string          `json:"retry_mode"`
	State            string          `json:"state"`
	Attempts         int             `json:"attempts"`
	CallID           string          `json:"call_id,omitempty"`
	ReceiptRef       string          `json:"receipt_ref,omitempty"`
	ErrorCode        string          `json:"error_code,omitempty"`
	ReceiptErrorCode string          `json:"receipt_error_code,omitempty"`
	Result           json.RawMessage `json:"result,omitempty"` // nil when none is stored
	CreatedAt        time.Time       `json:"created_at"`
	UpdatedAt        time.Time       `json:"updated_at"`
}

// EffectEvent is one entry of an effect's append-only audit trail.
type EffectEvent struct {
	// Seq orders the trail's rows; 0 on PostgreSQL for the events an
	// effect's own row records (its first write's: postgres/journal_born.go),
	// which come first.
	Seq      int64     `json:"seq"`
	Scope    string    `json:"scope"`
	EffectID string    `json:"effect_id"`
	CallID   string    `json:"call_id,omitempty"`
	State    string    `json:"state"`
	At       time.Time `json:"at"`
	Detail   string    `json:"detail,omitempty"`
}

// EffectFilter selects journal rows for listings.
type EffectFilter struct {
	State string
	Scope string
	Limit int // 0: no limit
}

// EffectPrepare is the reservation of an effect before its handler starts.
type EffectPrepare struct {
	Scope       string // the queue_id of the entry
	EffectID    string // "<queue_id>:<step id>", or CompensationID of one
	ToolRef     string
	Operation   string // OperationInvoke or OperationCompensate
	Fingerprint string // "sha256:<hex>" of the request
	RetryMode   string // RetryIdempotencyKey, RetryReconcile or RetryNone
	CallID      string // this attempt; it holds the effect until its outcome
	// LeaseToken is the fencing token of the entry's lease the call runs
	// under; 0 for an operator's action, which holds no lease.
	LeaseToken int64
}

// EffectOutcome is the result of one call, as the journal records it.
type EffectOutcome struct {
	Scope, EffectID, CallID string
	State                   string // EffectApplied, EffectNotApplied or EffectUnknown
	ReceiptRef              string
	Result                  json.RawMessage // the step's output; nil for none
	ErrorCode               string          // the call's public error code, if any
	ReceiptErrorCode        string          // EffectReceiptMissing, ...Mismatch, ...Invalid
	Detail                  string          // optional words for the audit event
}

// EffectResolution is an operator's settlement of an unknown effect.
type EffectResolution struct {
	State      string          // EffectApplied or EffectNotApplied
	ReceiptRef string          // required for applied
	Result     json.RawMessage // for applied; default {"receipt_ref": ReceiptRef}
	Operator   string          // who resolved, for the audit event; optional
	Reason     string          // the operator's --reason, for the audit event; optional
}

// JournalStats counts the journal writer's work, for metrics.
type JournalStats struct {
	Commits      uint64 // transactions committed (one fsync each)
	Transitions  uint64 // transitions committed
	Failed       uint64 // transitions that failed (their own error, or their batch's)
	LargestBatch uint64 // most transitions in one commit
	Pending      int64  // transitions submitted and not answered yet
}

// Compensation is what an operator's compensation of an applied effect did.
type Compensation struct {
	Scope          string          `json:"scope"`
	EffectID       string          `json:"effect_id"`
	CompensationID string          `json:"compensation_id"`
	ToolRef        string          `json:"tool_ref"`
	State          string          `json:"state"` // applied, not_applied or unknown
	Attempt        int             `json:"attempt"`
	CallID         string          `json:"call_id,omitempty"`
	ReceiptRef     string          `json:"receipt_ref,omitempty"`
	Output         json.RawMessage `json:"output,omitempty"`
	ErrorCode      string          `json:"error_code,omitempty"`
	Message        string          `json:"message,omitempty"`
	// Already is true when the compensation had been applied before: its
	// journaled result is returned and no handler was called.
	Already bool `json:"already,omitempty"`
}

// RefusedError is a Prepare refused by the stored row: Code is
// EffectInProgress, EffectRequestConflict, EffectReconciliationRequired,
// EffectOutcomeUnknown, or "" for an applied effect (match ErrEffectApplied).
// Effect is the row as stored.
type RefusedError struct {
	Effect Effect
	Code   string
	Reason string
}

// Error implements error.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("prepare effect %s/%s: %s", e.Effect.Scope, e.Effect.EffectID, e.Reason)
}

// Unwrap gives errors.Is/As the sentinel of an applied effect, or the
// *Error that carries the public code.
func (e *RefusedError) Unwrap() error {
	if e.Code == "" {
		return ErrEffectApplied
	}
	return &Error{Code: e.Code, Message: e.Reason}
}

// Validate checks the fields of a reservation, for every journal.
func (p EffectPrepare) Validate() error {
	switch {
	case p.Scope == "" || p.EffectID == "":
		return errors.New("prepare effect: scope and effect id are required")
	case p.ToolRef == "" || p.Fingerprint == "" || p.CallID == "":
		return errors.New("prepare effect: tool ref, fingerprint and call id are required")
	case p.RetryMode != RetryIdempotencyKey && p.RetryMode != RetryReconcile && p.RetryMode != RetryNone:
		return fmt.Errorf("prepare effect: retry mode %q is not one of idempotency_key, reconcile, none", p.RetryMode)
	}
	_, comp := IsCompensation(p.EffectID)
	switch p.Operation {
	case OperationInvoke, OperationCompensate:
	default:
		return fmt.Errorf("prepare effect: operation %q is not invoke or compensate", p.Operation)
	}
	if comp != (p.Operation == OperationCompensate) {
		return fmt.Errorf("prepare effect: operation compensate goes with an effect id ending in :compensate, and only it")
	}
	return nil
}

// Audit details every journal writes alike.
const (
	// DetailOrphaned: a dispatched effect whose call ended without its
	// outcome journaled (the outcome write failed for good): unknown.
	DetailOrphaned = "the call ended and its outcome could not be journaled; unknown"
	// DetailRecovered starts the detail of an effect that recovery found
	// dispatched and recorded unknown.
	DetailRecovered = "recovery at start-up: found dispatched, outcome unknown; "
	// DetailRequest starts, after "; ", the part of a dispatched event's
	// detail that says what request the call sends (DispatchRequest).
	DetailRequest = "request "
)

// RequestDetail is what a dispatched event's detail adds for the request a
// call sends: "; request <request>", "" for none, or a note that it was
// not kept when it held a secret value (SPEC §5: nothing stored holds one).
func RequestDetail(request string, holdsSecret bool) string {
	switch {
	case request == "":
		return ""
	case holdsSecret:
		return "; request not recorded: it held a secret value"
	}
	return "; " + DetailRequest + Clean(request)
}

// RequestOf is the request a dispatched event's detail records (see
// RequestDetail), or "".
func RequestOf(detail string) string {
	_, req, _ := strings.Cut(detail, "; "+DetailRequest)
	return req
}
