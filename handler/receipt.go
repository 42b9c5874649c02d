package handler

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	touba "github.com/touba/touba-trigger"
)

// CheckReceipt returns "" when r is a valid receipt for req, else the
// receipt error code the journal records (SPEC §4):
//
//   - EffectReceiptMissing: no receipt;
//   - EffectReceiptInvalid: no effect_id or fingerprint, or an outcome that
//     is not applied, not_applied or unknown;
//   - EffectReceiptMismatch: an effect_id or fingerprint that is not the
//     request's.
//
// For a request without Context.Effect the receipt must name the call id,
// and its fingerprint is not compared (there is none to compare with).
func CheckReceipt(req *Request, r *Receipt) (code string) {
	if r == nil {
		return touba.EEffectReceiptMissing
	}
	if r.EffectID == "" || r.Fingerprint == "" {
		return touba.EEffectReceiptInvalid
	}
	if r.EffectID != effectID(req) {
		return touba.EEffectReceiptMismatch
	}
	if e := req.Context.Effect; e != nil && r.Fingerprint != e.Fingerprint {
		return touba.EEffectReceiptMismatch
	}
	switch r.Outcome {
	case touba.EffectApplied, touba.EffectNotApplied, touba.EffectUnknown:
		return ""
	}
	return touba.EEffectReceiptInvalid
}

// wireResponse is a response as read, before its parts are judged: the
// receipt and error stay raw so that a malformed receipt is a receipt
// error, not a protocol error.
type wireResponse struct {
	CallID        string          `json:"call_id"`
	OK            *bool           `json:"ok"`
	Output        json.RawMessage `json:"output"`
	EffectReceipt json.RawMessage `json:"effect_receipt"`
	Error         json.RawMessage `json:"error"`
}

// wireError is the error of a response with ok false.
type wireError struct {
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Details json.RawMessage `json:"details"`
}

// parseResponse reads exactly one response document (surrounding
// whitespace allowed). It fails on anything that is not one JSON object with
// a boolean "ok", and on ok false without an error code.
func parseResponse(doc []byte) (*wireResponse, *wireError, error) {
	doc = bytes.TrimSpace(doc)
	if len(doc) == 0 {
		return nil, nil, fmt.Errorf("no response document")
	}
	if doc[0] != '{' {
		return nil, nil, fmt.Errorf("response is not one JSON object")
	}
	// Unmarshal checks the whole document first: anything but one valid
	// JSON value is a syntax error.
	var w wireResponse
	if err := json.Unmarshal(doc, &w); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return nil, nil, fmt.Errorf("response is not one JSON object")
		}
		return nil, nil, fmt.Errorf("decode response: %w", err)
	}
	if w.OK == nil {
		return nil, nil, fmt.Errorf(`response has no boolean "ok"`)
	}
	if *w.OK {
		return &w, nil, nil
	}
	var e wireError
	if isNull(w.Error) {
		return nil, nil, fmt.Errorf(`response with "ok": false has no error`)
	}
	if err := json.Unmarshal(w.Error, &e); err != nil {
		return nil, nil, fmt.Errorf("decode response error: %w", err)
	}
	if e.Code == "" {
		return nil, nil, fmt.Errorf("response error has no code")
	}
	return &w, &e, nil
}

// decodeReceipt reads a raw receipt; null or absent is missing, anything
// that is not an object of strings is invalid.
func decodeReceipt(raw json.RawMessage) (*Receipt, string) {
	if isNull(raw) {
		return nil, touba.EEffectReceiptMissing
	}
	if raw = bytes.TrimSpace(raw); raw[0] != '{' {
		return nil, touba.EEffectReceiptInvalid
	}
	var r Receipt
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, touba.EEffectReceiptInvalid
	}
	return &r, ""
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// interpret turns a handler's answer to a dispatched request into a Result
// (SPEC §4). A document that is not a response is HandlerProtocolError with
// outcome unknown: the handler ran, and nothing says what it did.
func interpret(req *Request, doc []byte) *Result {
	w, werr, err := parseResponse(doc)
	if err != nil {
		return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerProtocolError, "%v", err))
	}
	return interpretParsed(req, w, werr)
}

// interpretParsed is interpret of a document parseResponse accepted, its
// text made storable (cleanAnswer).
func interpretParsed(req *Request, w *wireResponse, werr *wireError) *Result {
	return cleanAnswer(judge(req, w, werr))
}

// judge decides a parsed response's result: ok or error, outcome, receipt.
func judge(req *Request, w *wireResponse, werr *wireError) *Result {
	res := &Result{Dispatched: true}
	receipt := w.EffectReceipt
	if werr == nil {
		res.OK = true
		res.Output = w.Output
		if len(res.Output) == 0 {
			res.Output = json.RawMessage("null")
		}
	} else {
		res.Err = &touba.Error{Code: werr.Code, Message: werr.Message}
		// A refusal carries its receipt in error.details; accept one at the
		// top level too rather than lose it.
		var details struct {
			EffectReceipt json.RawMessage `json:"effect_receipt"`
		}
		if !isNull(werr.Details) && json.Unmarshal(werr.Details, &details) == nil && !isNull(details.EffectReceipt) {
			receipt = details.EffectReceipt
		}
	}
	if req.Context.Effect == nil {
		return res
	}
	r, code := decodeReceipt(receipt)
	if code == "" {
		code = CheckReceipt(req, r)
	}
	if code != "" {
		res.Outcome = touba.EffectUnknown
		res.ReceiptErrorCode = code
		if res.OK {
			// Without a valid receipt an ok answer is not a success the
			// dispatcher may build on: the receipt error becomes the error.
			res.OK = false
			res.Err = touba.Errorf(code, "handler answered ok without a valid effect receipt")
		}
		return res
	}
	res.Outcome = string(r.Outcome)
	res.ReceiptRef = r.ReceiptRef
	return res
}
