package touba

import (
	"errors"
	"fmt"
	"net/http"
)

// Public error codes of the contract (SPEC §3.1, §4, §5, §6). The code is
// what senders, handlers and operators see; the message is for humans.
const (
	ECONFIG   = "ConfigInvalid"
	EINTERNAL = "Internal"

	// Command line (§3): a refusal of the CLI or of serve that no other
	// code names. UsageInvalid exits 2; the others exit 1.
	EUsage             = "UsageInvalid"      // unknown command or flag, wrong arguments
	EDaemonUnavailable = "DaemonUnavailable" // no daemon on the admin socket, and no files to open
	ENothingReplayed   = "NothingReplayed"   // `queue replay` found nothing it could replay

	// Intake (§3.1).
	ETriggerNotFound              = "TriggerNotFound"
	ETriggerPayloadTooLarge       = "TriggerPayloadTooLarge"
	ETriggerEventIDInvalid        = "TriggerEventIdInvalid"
	ETriggerEventIDMissing        = "TriggerEventIdMissing" // source.event_id.required, and the request has none
	ETriggerSignatureInvalid      = "TriggerSignatureInvalid"
	ETriggerEventPayloadConflict  = "TriggerEventPayloadConflict"
	ETriggerReplayRejected        = "TriggerReplayRejected"
	ETriggerUnavailable           = "TriggerUnavailable"
	ETriggerSourceForbidden       = "TriggerSourceForbidden"
	ETriggerRateLimited           = "TriggerRateLimited"
	EKeyTooLong                   = "KeyTooLong" // a key value over MaxKeyBytes of JSON (keylimit.go): 422, nothing enqueued
	EMethodNotAllowed             = "MethodNotAllowed"
	EStepInputUnresolved          = "StepInputUnresolved"
	EEffectJournalRequired        = "EffectJournalRequired"
	EJournalLocked                = "JournalLocked"
	EJournalLockStale             = "JournalLockStale"
	EEffectInProgress             = "EffectInProgress"
	EEffectResultUnavailable      = "EffectResultUnavailable"
	EEffectReconciliationRequired = "EffectReconciliationRequired"
	EEffectOutcomeUnknown         = "EffectOutcomeUnknown"
	EEffectRequestConflict        = "EffectRequestConflict"
	EEffectNotUnknown             = "EffectNotUnknown"
	ESecretValueRefused           = "SecretValueRefused"

	// Handler protocol (§4).
	EHandlerTimeout         = "HandlerTimeout"
	EHandlerFailed          = "HandlerFailed"
	EHandlerProtocolError   = "HandlerProtocolError"
	EHandlerPayloadTooLarge = "HandlerPayloadTooLarge"
	EEffectReceiptMissing   = "EffectReceiptMissing"
	EEffectReceiptMismatch  = "EffectReceiptMismatch"
	EEffectReceiptInvalid   = "EffectReceiptInvalid"
	EWebhookRejected        = "WebhookRejected"
	EGrantMissing           = "GrantMissing"
	// EHttpRejected: an http binding's remote answered a 4xx (SPEC §2.2);
	// the effect is not_applied and the status is in the outcome's detail.
	EHttpRejected = "HttpRejected"
	// EEgressForbidden: the egress guard refused the address a webhook or
	// http call would connect to (SPEC §2.2); nothing was sent.
	EEgressForbidden = "EgressForbidden"
	// EBrokerRejected: a broker binding's broker refused the message (SPEC
	// §2.2 "Broker destinations": no stream for the subject, an
	// authorization failure, a negative acknowledgement); the effect is
	// not_applied: nothing was stored.
	EBrokerRejected = "BrokerRejected"

	// Operators (§6): the admin API, the CLI and the console.
	ENotFound                     = "NotFound"
	EBadRequest                   = "BadRequest"
	EDeliveryNotReplayable        = "DeliveryNotReplayable"
	ECompensationNotSupported     = "CompensationNotSupported"
	EEffectNotCompensable         = "EffectNotCompensable"
	ECompensationInputUnavailable = "CompensationInputUnavailable"
	// EDispatcherStopping: a run postponed because the dispatcher stopped
	// while it waited for a binding slot (no attempt spent).
	EDispatcherStopping = "DispatcherStopping"
	// EBindingBusy and ECircuitOpen: a run handed back to wait, pending
	// and holding nothing, for a slot of its binding's max_concurrency or
	// for its open circuit's probe (SPEC §2.2 "Holds take nothing"); no
	// attempt spent. They name why a pending entry waits, never a failure.
	EBindingBusy = "BindingBusy"
	ECircuitOpen = "CircuitOpen"
	// ETriggerPaused: a run that found its trigger paused between two
	// steps, handed back pending until the trigger resumes.
	ETriggerPaused = "TriggerPaused"
	// EProgramReloaded: a run whose trigger's definition a reload changed
	// while it ran, handed back pending between two steps so that it goes
	// on under the running program (SPEC §2.3); no attempt spent.
	EProgramReloaded = "ProgramReloaded"
	// EEntryBusy: another operator action (a compensation, a replay) is
	// working on the entry right now.
	EEntryBusy = "EntryBusy"
	// ELeaseLost: the entry is leased under a newer fencing token (its
	// lease expired and another node took it over, SPEC §8): the node
	// that lost it changes nothing and starts no new call.
	ELeaseLost = "LeaseLost"
	// ENodeIdInUse: another live node runs under this --node-id (SPEC §8).
	ENodeIdInUse = "NodeIdInUse"
	// ESchemaTooNew: the database's schema, or a SQLite file, records that
	// it needs a newer release than this binary (SPEC §8 "Rolling
	// upgrades"): a start-up refusal, exit 2, naming both versions.
	ESchemaTooNew = "SchemaTooNew"
	// EAdminForbidden: the admin socket's peer is neither root nor the
	// daemon's own user.
	EAdminForbidden = "AdminForbidden"
	// Console (§6.1): a request without the console's token or session,
	// a POST without its session's CSRF token, a --console-listen given
	// no token to check, and an address refused for a while after too
	// many wrong tokens.
	EConsoleUnauthorized  = "ConsoleUnauthorized"
	EConsoleCSRFInvalid   = "ConsoleCsrfInvalid"
	EConsoleTokenRequired = "ConsoleTokenRequired"
	EConsoleThrottled     = "ConsoleThrottled"
	// Workers that connect out (SPEC §4.3): a take or answer without a
	// token of a worker binding; a take for a tool the token does not
	// serve; an answer to a call that is no longer the worker's (timed
	// out, answered, or never handed to it), which is not used; an
	// address refused for a while after too many wrong tokens.
	EWorkerUnauthorized = "WorkerUnauthorized"
	EWorkerForbidden    = "WorkerForbidden"
	EWorkerCallNotHeld  = "WorkerCallNotHeld"
	EWorkerThrottled    = "WorkerThrottled"
	// EWorkerUnavailable: no worker is connected with room to take a
	// worker binding's call; the run is handed back to wait for one,
	// without spending an attempt (a hold, SPEC §2.2).
	EWorkerUnavailable = "WorkerUnavailable"
	// ENetworkIsolationUnavailable: process bindings without the network
	// grant, on a host where the daemon cannot start a handler without
	// network, and no --allow-unisolated-handlers (SPEC §2.2). Exits 2.
	ENetworkIsolationUnavailable = "NetworkIsolationUnavailable"
	// EProgramInvalid: an expression of the program (SPEC §2.4) that does
	// not compile, type-check or fit --expression-cost-limit; the load is
	// refused naming the file, the JSON path and CEL's message (exit 2).
	EProgramInvalid = "ProgramInvalid"
	// EExpressionFailed: an expression failed at run time (an error, or
	// past the cost limit): in a filter the delivery is answered 202
	// filtered and logged with this code; in a key at intake, 422 and
	// nothing enqueued; in a step's input or when, the run fails (not
	// retried). SPEC §2.4.
	EExpressionFailed = "ExpressionFailed"
)

// statuses is the one code → HTTP status table, for intake (SPEC §3.1) and
// the operators' APIs alike.
var statuses = map[string]int{
	ETriggerNotFound:             http.StatusNotFound,
	ENotFound:                    http.StatusNotFound,
	ETriggerPayloadTooLarge:      http.StatusRequestEntityTooLarge,
	ETriggerEventIDInvalid:       http.StatusBadRequest,
	ETriggerEventIDMissing:       http.StatusBadRequest,
	EBadRequest:                  http.StatusBadRequest,
	ETriggerSignatureInvalid:     http.StatusUnauthorized,
	ETriggerEventPayloadConflict: http.StatusConflict,
	ETriggerReplayRejected:       http.StatusConflict,
	EEffectNotUnknown:            http.StatusConflict,
	EEntryBusy:                   http.StatusConflict,
	EEntryNotResumable:           http.StatusConflict,
	ELeaseLost:                   http.StatusConflict,
	EAdminForbidden:              http.StatusForbidden,
	EConsoleUnauthorized:         http.StatusUnauthorized,
	EConsoleCSRFInvalid:          http.StatusForbidden,
	EConsoleThrottled:            http.StatusTooManyRequests,
	EWorkerUnauthorized:          http.StatusUnauthorized,
	EWorkerForbidden:             http.StatusForbidden,
	EWorkerCallNotHeld:           http.StatusConflict,
	EWorkerThrottled:             http.StatusTooManyRequests,
	EMethodNotAllowed:            http.StatusMethodNotAllowed,
	ETriggerUnavailable:          http.StatusServiceUnavailable,
	ETriggerSourceForbidden:      http.StatusForbidden,
	ETriggerRateLimited:          http.StatusTooManyRequests,
	EKeyTooLong:                  http.StatusUnprocessableEntity,
	EExpressionFailed:            http.StatusUnprocessableEntity,
	EINTERNAL:                    http.StatusInternalServerError,
}

// HTTPStatus maps a public error code to its HTTP status. A code the table
// does not name is a refusal of a well-formed request: 422.
func HTTPStatus(code string) int {
	if s, ok := statuses[code]; ok {
		return s
	}
	return http.StatusUnprocessableEntity
}

// Error is an error with a public code. QueueID is set where the error
// concerns an existing queue entry, so callers can point to it.
type Error struct {
	Code    string
	Message string
	QueueID string
}

// Error implements the error interface.
func (e *Error) Error() string {
	return fmt.Sprintf("touba error: code=%s message=%s", e.Code, e.Message)
}

// Errorf returns an *Error with the given code and formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the public code of err, or EINTERNAL for an error that
// carries none, or "" for nil.
func ErrorCode(err error) string {
	var e *Error
	if err == nil {
		return ""
	} else if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the public message of err; internal errors get a
// generic text so that no detail leaks to a sender.
func ErrorMessage(err error) string {
	var e *Error
	if err == nil {
		return ""
	} else if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

// ConfigError is one refusal of a configuration file (the program or the
// manifest): the file, the JSON path of the offending value, such as
// `$.bindings["tool:a/B"].effect_contract.kind`, and the rule it breaks.
// Its public code is ConfigInvalid (exit 2).
type ConfigError struct {
	File string
	Path string
	Rule string
	// Code is the public code when not ConfigInvalid: ProgramInvalid for
	// an expression refused at load (SPEC §2.4).
	Code string
}

// Error renders "<file>: <path>: <rule>".
func (e *ConfigError) Error() string { return e.File + ": " + e.Path + ": " + e.Rule }

// Unwrap exposes the public code, so that ErrorCode reports ECONFIG.
func (e *ConfigError) Unwrap() error {
	code := e.Code
	if code == "" {
		code = ECONFIG
	}
	return &Error{Code: code, Message: e.Error()}
}
