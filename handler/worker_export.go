package handler

import (
	"time"

	touba "github.com/touba/touba-trigger"
)

// What a runner outside this package needs to speak the protocol as the
// process runners do: the worker kind (package worker) hands requests to
// workers that connect out, and reads their answers exactly as a process
// handler's (SPEC §4.3).

// EncodeRequest renders req as compact JSON ending in a newline, with the
// defaults a handler may rely on and deadline as deadline_unix_ms.
func EncodeRequest(req *Request, deadline time.Time) ([]byte, error) {
	return encodeRequest(req, deadline)
}

// Interpret reads a handler's answer to a dispatched request (SPEC §4):
// receipts checked, codes kept, a document that is not a response a
// HandlerProtocolError with outcome unknown.
func Interpret(req *Request, doc []byte) *Result { return interpret(req, doc) }

// Failed is the Result of a call that produced no usable answer; the
// outcome is dropped for a call without an effect.
func Failed(req *Request, outcome string, dispatched bool, err *touba.Error) *Result {
	return fail(req, outcome, dispatched, err)
}

// HookError is the dispatched hook's error as a Result's error.
func HookError(err error) *touba.Error { return hookError(err) }
