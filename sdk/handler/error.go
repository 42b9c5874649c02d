package handler

import "fmt"

// Error is a business error with a public code, returned by Run. The host
// keeps Code as the call's public error even when the receipt is missing,
// so choose codes callers can act on ("ExternalWriteRefused"). Message is
// public too: describe the problem without connection strings, queries or
// private data.
type Error struct {
	Code    string
	Message string
	// Details is optional JSON-encodable context for the caller. The key
	// "effect_receipt" is reserved: the SDK fills it from Receipt.
	Details map[string]any
	// Receipt, when made by the failing call's Call.Receipt, tells the host
	// what became of the effect (for example NotApplied after a confirmed
	// rollback). Without it the effect's outcome stays unknown.
	Receipt *Receipt
}

// Errorf returns an *Error with the given code and formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Error implements the error interface.
func (e *Error) Error() string {
	return e.Code + ": " + e.Message
}

// WithDetail sets one detail and returns e.
func (e *Error) WithDetail(key string, value any) *Error {
	if e.Details == nil {
		e.Details = make(map[string]any)
	}
	e.Details[key] = value
	return e
}

// WithReceipt attaches an effect receipt and returns e.
func (e *Error) WithReceipt(r *Receipt) *Error {
	e.Receipt = r
	return e
}
