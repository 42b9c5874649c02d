package handler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/touba/touba-trigger/sdk/handler"
)

// TestServeOneChecks drives ServeOne through the protocol checks and the
// ways a Run can end.
func TestServeOneChecks(t *testing.T) {
	with := func(m map[string]any, edit func(m map[string]any)) []byte {
		edit(m)
		b, _ := json.Marshal(m)
		return b
	}
	ctxOf := func(m map[string]any) map[string]any { return m["context"].(map[string]any) }
	fail := func(err error) func(context.Context, *handler.Call) (*handler.Result, error) {
		return func(context.Context, *handler.Call) (*handler.Result, error) { return nil, err }
	}

	tests := []struct {
		name        string
		request     []byte
		run         func(context.Context, *handler.Call) (*handler.Result, error)
		wantCode    string // "" for ok
		wantRun     bool
		wantReceipt string // outcome of the receipt (result or error details); "" for none
	}{
		{name: "ok", request: with(newRequest("c1", map[string]any{"a": 1}, false), func(map[string]any) {}),
			run: echo, wantRun: true},
		{name: "external write without receipt", request: with(newRequest("c1", nil, true), func(map[string]any) {}),
			run: echo, wantRun: true},
		{name: "wrong protocol", request: with(newRequest("c1", nil, true), func(m map[string]any) { m["protocol"] = "touba-tool-handler-v2" }),
			run: echo, wantCode: "HandlerProtocolError"},
		{name: "no protocol", request: with(newRequest("c1", nil, false), func(m map[string]any) { delete(m, "protocol") }),
			run: echo, wantCode: "HandlerProtocolError"},
		{name: "unknown operation", request: with(newRequest("c1", nil, false), func(m map[string]any) { m["operation"] = "delete" }),
			run: echo, wantCode: "HandlerProtocolError"},
		{name: "not json", request: []byte("hello\n"), run: echo, wantCode: "HandlerProtocolError"},
		{name: "array", request: []byte(`[1,2]`), run: echo, wantCode: "HandlerProtocolError"},
		{name: "empty stdin", request: nil, run: echo, wantCode: "HandlerProtocolError"},
		{name: "wrong field type", request: with(newRequest("c1", nil, false), func(m map[string]any) { ctxOf(m)["attempt"] = "one" }),
			run: echo, wantCode: "HandlerProtocolError"},
		{name: "effect without fingerprint", request: with(newRequest("c1", nil, true), func(m map[string]any) {
			delete(ctxOf(m)["effect"].(map[string]any), "fingerprint")
		}), run: echo, wantCode: "HandlerProtocolError"},
		{name: "tool ref mismatch", request: with(newRequest("c1", nil, true), func(m map[string]any) { m["tool_ref"] = "tool:other/Thing" }),
			run: echo, wantCode: "ToolRefMismatch", wantReceipt: "not_applied"},
		{name: "grant missing", request: with(newRequest("c1", nil, true), func(m map[string]any) { ctxOf(m)["grants"] = []string{"files"} }),
			run: echo, wantCode: "GrantMissing", wantReceipt: "not_applied"},
		{name: "grants absent", request: with(newRequest("c1", nil, false), func(m map[string]any) { delete(ctxOf(m), "grants") }),
			run: echo, wantCode: "GrantMissing"},
		{name: "panic", request: with(newRequest("c1", nil, true), func(map[string]any) {}),
			run:      func(context.Context, *handler.Call) (*handler.Result, error) { panic("boom") },
			wantCode: "HandlerPanic", wantRun: true},
		{name: "panic in output encoding", request: with(newRequest("c1", nil, false), func(map[string]any) {}),
			run:      func(context.Context, *handler.Call) (*handler.Result, error) { return handler.Output(panicky{}), nil },
			wantCode: "HandlerPanic", wantRun: true},
		{name: "plain error", request: with(newRequest("c1", nil, false), func(map[string]any) {}),
			run: fail(errors.New("dial db password=hunter2")), wantCode: "HandlerFailed", wantRun: true},
		{name: "business error", request: with(newRequest("c1", nil, true), func(map[string]any) {}),
			run: fail(handler.Errorf("ExternalWriteRefused", "refused")), wantCode: "ExternalWriteRefused", wantRun: true},
		{name: "wrapped business error", request: with(newRequest("c1", nil, true), func(map[string]any) {}),
			run: fail(errorsJoin(handler.Errorf("OutOfStock", "none left"))), wantCode: "OutOfStock", wantRun: true},
		{name: "error without code", request: with(newRequest("c1", nil, false), func(map[string]any) {}),
			run: fail(&handler.Error{Message: "x"}), wantCode: "HandlerFailed", wantRun: true},
		{name: "output not encodable", request: with(newRequest("c1", nil, true), func(map[string]any) {}),
			run: func(_ context.Context, c *handler.Call) (*handler.Result, error) {
				return handler.Output(make(chan int)).WithReceipt(c.Receipt(handler.Applied, "x:1")), nil
			}, wantCode: "HandlerFailed", wantRun: true, wantReceipt: "applied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ran atomic.Bool
			tool := newTool(t, func(ctx context.Context, c *handler.Call) (*handler.Result, error) {
				ran.Store(true)
				return tt.run(ctx, c)
			})
			r := serveOne(t, tool, tt.request)
			if got, want := r.code(), tt.wantCode; got != want {
				t.Fatalf("code=%q, want %q (response %+v)", got, want, r.Error)
			}
			if got, want := r.OK, tt.wantCode == ""; got != want {
				t.Fatalf("ok=%v, want %v", got, want)
			}
			if got, want := ran.Load(), tt.wantRun; got != want {
				t.Fatalf("run called=%v, want %v", got, want)
			}
			rc := r.EffectReceipt
			if !r.OK {
				if r.EffectReceipt != nil {
					t.Fatalf("error response has a top-level receipt")
				}
				rc = r.errorReceipt(t)
			}
			var outcome string
			if rc != nil {
				outcome = rc.Outcome
			}
			if got, want := outcome, tt.wantReceipt; got != want {
				t.Fatalf("receipt outcome=%q, want %q", got, want)
			}
			if r.Error != nil && strings.Contains(r.Error.Message, "hunter2") {
				t.Fatalf("internal error text leaked into the response: %q", r.Error.Message)
			}
		})
	}
}

type panicky struct{}

func (panicky) MarshalJSON() ([]byte, error) { panic("marshal boom") }

func errorsJoin(err error) error { return errors.Join(errors.New("context"), err) }

// TestServeOneOutput checks the success response: the output as returned,
// <, > and & not escaped, and one request only.
func TestServeOneOutput(t *testing.T) {
	in := map[string]any{"html": "<a&b>", "n": 1.5}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, id := range []string{"c1", "c2"} { // c2 must be left unread
		req := newRequest(id, in, false)
		if err := enc.Encode(req); err != nil {
			t.Fatal(err)
		}
	}
	r := serveOne(t, newTool(t, func(_ context.Context, c *handler.Call) (*handler.Result, error) {
		var v map[string]any
		if err := c.Decode(&v); err != nil {
			return nil, err
		}
		return handler.Output(v), nil
	}), buf.Bytes())
	if !r.OK {
		t.Fatalf("response not ok: %+v", r.Error)
	}
	if got, want := string(r.Output), `{"html":"<a&b>","n":1.5}`; got != want {
		t.Fatalf("output=%s, want %s", got, want)
	}
}

// TestServeOneNilResult checks that a nil result is an ok with null output.
func TestServeOneNilResult(t *testing.T) {
	r := serveOne(t, newTool(t, func(context.Context, *handler.Call) (*handler.Result, error) { return nil, nil }),
		mustJSON(t, newRequest("c1", nil, false)))
	if got, want := string(r.Output), "null"; !r.OK || got != want {
		t.Fatalf("ok=%v output=%s, want ok null", r.OK, got)
	}
}

// TestCallFields checks what Run sees: operation (compensate passed
// through), context, deadline, decoded input, effect.
func TestCallFields(t *testing.T) {
	req := newRequest("call-7", map[string]any{"request": map[string]any{"item": "tea"}}, true)
	req["operation"] = "compensate"
	deadline := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	req["context"].(map[string]any)["deadline_unix_ms"] = deadline.UnixMilli()
	req["context"].(map[string]any)["traceparent"] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	var got struct {
		call     handler.Call
		effect   *handler.Effect
		deadline time.Time
		item     string
	}
	r := serveOne(t, newTool(t, func(ctx context.Context, c *handler.Call) (*handler.Result, error) {
		var in struct {
			Request struct{ Item string } `json:"request"`
		}
		if err := c.Decode(&in); err != nil {
			return nil, err
		}
		got.call, got.effect, got.item = *c, c.Effect(), in.Request.Item
		got.deadline, _ = ctx.Deadline()
		return nil, nil
	}), mustJSON(t, req))
	if !r.OK {
		t.Fatalf("response not ok: %+v", r.Error)
	}
	if got, want := got.call.Operation, handler.Compensate; got != want {
		t.Fatalf("Operation=%q, want %q", got, want)
	}
	if got, want := got.item, "tea"; got != want {
		t.Fatalf("decoded item=%q, want %q", got, want)
	}
	c := got.call.Context
	if c.TriggerRef != "trigger:orders" || c.EventID != "evt-1" || c.QueueID != "q1" || c.RunID != "r1" ||
		c.CallID != "call-7" || c.Attempt != 1 || len(c.Grants) != 1 || c.Grants[0] != "network" {
		t.Fatalf("Context=%+v", c)
	}
	if got, want := c.TraceParent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; got != want {
		t.Fatalf("TraceParent=%q, want %q", got, want)
	}
	if !c.Deadline.Equal(deadline) || !got.deadline.Equal(deadline) {
		t.Fatalf("deadline: context %v, ctx %v, want %v", c.Deadline, got.deadline, deadline)
	}
	e := got.effect
	if e == nil || e.Scope != "q1" || e.EffectID != "q1:call-7" || e.RetryMode != "idempotency_key" || e.Attempt != 1 ||
		e.Fingerprint != "sha256:"+strings.Repeat("ab", 32) {
		t.Fatalf("Effect()=%+v", e)
	}
}

// TestServeInvalidTool checks that a tool without Ref or Run is refused
// before anything is read.
func TestServeInvalidTool(t *testing.T) {
	for _, tool := range []handler.Tool{{Run: echo}, {Ref: testRef}} {
		var out strings.Builder
		if err := handler.ServeOne(context.Background(), tool, strings.NewReader("{}"), &out); err == nil {
			t.Fatalf("ServeOne(%+v) succeeded", tool)
		}
		if err := handler.ServePersistent(context.Background(), tool, strings.NewReader("{}\n"), &out); err == nil {
			t.Fatalf("ServePersistent(%+v) succeeded", tool)
		}
		if got := out.String(); got != "" {
			t.Fatalf("wrote %q", got)
		}
	}
}

// A Run that returns a nil *Error in its error result succeeded: its
// receipt must reach the host, not turn into a panic answer.
func TestTypedNilErrorIsSuccess(t *testing.T) {
	tool := newTool(t, func(_ context.Context, c *handler.Call) (*handler.Result, error) {
		var herr *handler.Error
		return handler.Output(map[string]int{"n": 1}).WithReceipt(c.Receipt(handler.Applied, "r:1")), herr
	})
	req, _ := json.Marshal(newRequest("c1", map[string]int{"n": 1}, true))
	resp := serveOne(t, tool, req)
	if !resp.OK || resp.EffectReceipt == nil {
		t.Fatalf("answer %+v: want ok with its receipt", resp)
	}
}
