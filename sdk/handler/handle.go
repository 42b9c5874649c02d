package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/touba/touba-trigger/protocol"
)

// handle answers one request document with one response line (ending in
// "\n"). It never panics and always answers, whatever raw holds. In
// persistent mode the response carries the request's call_id.
func (t *Tool) handle(ctx context.Context, raw []byte, persistent bool) []byte {
	var req protocol.Request
	resp := checkRequest(&req, json.Unmarshal(raw, &req))
	if resp == nil {
		resp = t.answer(ctx, newCall(&req))
	}
	if persistent {
		// json.Unmarshal fills what it can before a type error, so even a
		// malformed request usually yields its call_id.
		id := req.Context.CallID
		resp.CallID = &id
	}
	return encodeLine(resp)
}

// checkRequest returns the HandlerProtocolError answer to a request that is
// not a well-formed touba-tool-handler-v1 request, or nil.
func checkRequest(req *protocol.Request, decodeErr error) *protocol.Response {
	if decodeErr != nil {
		return failure(CodeProtocolError, "request is not a JSON object of "+Protocol+": "+decodeErr.Error())
	}
	if req.Protocol != Protocol {
		return failure(CodeProtocolError, fmt.Sprintf("protocol %q is not %s", req.Protocol, Protocol))
	}
	if req.Operation != Invoke && req.Operation != Compensate {
		return failure(CodeProtocolError, fmt.Sprintf("operation %q is not invoke or compensate", req.Operation))
	}
	if e := req.Context.Effect; e != nil && (e.EffectID == "" || e.Fingerprint == "") {
		return failure(CodeProtocolError, "context.effect lacks effect_id or fingerprint")
	}
	return nil
}

// answer runs the checks that need the tool, then the tool, for a request
// checkRequest accepted.
func (t *Tool) answer(ctx context.Context, c *Call) *protocol.Response {
	// The checks below refuse before Run, so for an external write the SDK
	// knows the write did not happen and says so.
	if c.ToolRef != t.Ref {
		resp := failure(CodeToolRefMismatch, fmt.Sprintf("this handler implements %s, not %s", t.Ref, c.ToolRef))
		return withErrorReceipt(resp, c.refusedReceipt())
	}
	var missing []string
	for _, g := range t.RequiredGrants {
		if !slices.Contains(c.Context.Grants, g) {
			missing = append(missing, g)
		}
	}
	if len(missing) > 0 {
		resp := failure(CodeGrantMissing, fmt.Sprintf("the binding does not grant %q", missing))
		resp.Error.Details = map[string]json.RawMessage{"missing": mustJSON(missing)}
		return withErrorReceipt(resp, c.refusedReceipt())
	}
	return t.run(ctx, c)
}

// refusedReceipt states that the call's effect, if any, did not happen:
// the SDK refused the call before Run.
func (c *Call) refusedReceipt() *protocol.Receipt {
	w, _ := c.Receipt(NotApplied, "").wire(c)
	return w
}

func newCall(req *protocol.Request) *Call {
	wc := req.Context
	c := &Call{
		Operation: req.Operation,
		ToolRef:   req.ToolRef,
		Input:     req.Input,
		Context: RequestContext{
			TriggerRef: wc.TriggerRef,
			EventID:    wc.EventID,
			QueueID:    wc.QueueID,
			RunID:      wc.RunID,
			CallID:     wc.CallID,
			Attempt:    wc.Attempt,
			Grants:     slices.Clone(wc.Grants),
			// TraceParent: the host's handler-call span (SPEC §4, §7).
			TraceParent: wc.TraceParent,
		},
	}
	if wc.DeadlineUnixMS > 0 {
		c.Context.Deadline = time.UnixMilli(wc.DeadlineUnixMS)
	}
	if e := wc.Effect; e != nil {
		c.effect = &Effect{Scope: e.Scope, EffectID: e.EffectID, Fingerprint: e.Fingerprint,
			RetryMode: e.RetryMode, Attempt: e.Attempt}
	}
	return c
}

// run calls Run and turns whatever it does (result, error, panic) into a
// response. User code that may panic, Run and the encoding of user values,
// runs under the recover.
func (t *Tool) run(ctx context.Context, c *Call) (resp *protocol.Response) {
	defer func() {
		if v := recover(); v != nil {
			t.logf("handler %s: call %s panicked: %v\n%s", t.Ref, c.Context.CallID, v, debug.Stack())
			resp = failure(CodePanic, "the handler panicked")
		}
	}()
	if !c.Context.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, c.Context.Deadline)
		defer cancel()
	}
	res, err := t.Run(ctx, c)
	// A nil *Error returned as error is not nil: it must mean success.
	if he, ok := err.(*Error); ok && he == nil {
		err = nil
	}
	if err != nil {
		return t.errorResponse(c, err)
	}
	if res == nil {
		res = Output(nil)
	}
	receipt := t.receipt(c, res.receipt)
	out, err := marshal(res.output)
	if err != nil {
		t.logf("handler %s: call %s: encode output: %v", t.Ref, c.Context.CallID, err)
		// The write may still have happened; keep the handler's statement.
		return withErrorReceipt(failure(CodeFailed, "the handler output cannot be encoded as JSON"), receipt)
	}
	return &protocol.Response{OK: true, Output: out, EffectReceipt: receipt}
}

func (t *Tool) errorResponse(c *Call, err error) *protocol.Response {
	var he *Error
	if !errors.As(err, &he) {
		// A plain error is internal: its text may hold private data.
		t.logf("handler %s: call %s failed: %v", t.Ref, c.Context.CallID, err)
		return failure(CodeFailed, "the handler failed")
	}
	code := he.Code
	if code == "" {
		code = CodeFailed
	}
	resp := failure(code, he.Message)
	for k, v := range he.Details {
		if k == "effect_receipt" {
			// Only a bound receipt may fill this key.
			t.logf("handler %s: call %s: detail effect_receipt ignored; use Error.Receipt", t.Ref, c.Context.CallID)
			continue
		}
		b, err := marshal(v)
		if err != nil {
			t.logf("handler %s: call %s: detail %q dropped: %v", t.Ref, c.Context.CallID, k, err)
			continue
		}
		if resp.Error.Details == nil {
			resp.Error.Details = make(map[string]json.RawMessage)
		}
		resp.Error.Details[k] = b
	}
	return withErrorReceipt(resp, t.receipt(c, he.Receipt))
}

// receipt returns the wire form of r if it may be sent in the answer to c.
// A receipt that is not c's is dropped: the host then records the effect
// as unknown with a missing receipt, which is the truth as far as it knows.
func (t *Tool) receipt(c *Call, r *Receipt) *protocol.Receipt {
	w, why := r.wire(c)
	if why != "" {
		t.logf("handler %s: call %s: receipt dropped: %s", t.Ref, c.Context.CallID, why)
	}
	return w
}

func failure(code, message string) *protocol.Response {
	return &protocol.Response{Error: &protocol.ErrorBody{Code: code, Message: message}}
}

func withErrorReceipt(resp *protocol.Response, r *protocol.Receipt) *protocol.Response {
	if r == nil {
		return resp
	}
	if resp.Error.Details == nil {
		resp.Error.Details = make(map[string]json.RawMessage)
	}
	resp.Error.Details["effect_receipt"] = mustJSON(r)
	return resp
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("handler: encode %T: %v", v, err))
	}
	return b
}

// marshal encodes a user value compactly, leaving <, > and & as they are:
// the output is data for later steps, not HTML.
func marshal(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// encodeLine encodes resp as one compact line. Output and details were
// encoded already, so this cannot meet a user type.
func encodeLine(resp *protocol.Response) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(resp); err != nil {
		buf.Reset()
		fallback := failure(CodeFailed, "the response cannot be encoded")
		fallback.CallID = resp.CallID
		_ = enc.Encode(fallback) // strings only: cannot fail
	}
	return buf.Bytes()
}
