package handler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/sdk/handler"
)

const testRef = "tool:sdk.test/Echo"

// response is the host's view of a handler answer, decoded strictly so a
// stray field fails the test.
type response struct {
	CallID        *string         `json:"call_id"`
	OK            bool            `json:"ok"`
	Output        json.RawMessage `json:"output"`
	EffectReceipt *receipt        `json:"effect_receipt"`
	Error         *struct {
		Code    string                     `json:"code"`
		Message string                     `json:"message"`
		Details map[string]json.RawMessage `json:"details"`
	} `json:"error"`
}

type receipt struct {
	EffectID    string `json:"effect_id"`
	Fingerprint string `json:"fingerprint"`
	Outcome     string `json:"outcome"`
	ReceiptRef  string `json:"receipt_ref"`
}

// code returns the error code of r, or "" for a success.
func (r response) code() string {
	if r.Error == nil {
		return ""
	}
	return r.Error.Code
}

// errorReceipt returns the receipt in error.details, or nil.
func (r response) errorReceipt(tb testing.TB) *receipt {
	tb.Helper()
	if r.Error == nil || r.Error.Details["effect_receipt"] == nil {
		return nil
	}
	var rc receipt
	mustDecodeStrict(tb, r.Error.Details["effect_receipt"], &rc)
	return &rc
}

// newRequest returns a valid request document as a map, so tests can
// break one part of it. With effect true it is an external_write call.
func newRequest(callID string, input any, effect bool) map[string]any {
	ctx := map[string]any{
		"trigger_ref": "trigger:orders", "event_id": "evt-1", "queue_id": "q1", "run_id": "r1",
		"call_id": callID, "attempt": 1, "deadline_unix_ms": 0, "grants": []string{"network"},
	}
	if effect {
		ctx["effect"] = map[string]any{
			"scope": "q1", "effect_id": "q1:" + callID, "fingerprint": "sha256:" + strings.Repeat("ab", 32),
			"retry_mode": "idempotency_key", "attempt": 1,
		}
	}
	return map[string]any{
		"protocol": handler.Protocol, "operation": "invoke", "tool_ref": testRef,
		"input": input, "context": ctx,
	}
}

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatalf("marshal: %v", err)
	}
	return b
}

func mustDecodeStrict(tb testing.TB, b []byte, v any) {
	tb.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		tb.Fatalf("decode %s: %v", b, err)
	}
}

// parseLine decodes one response line and checks it is one line.
func parseLine(tb testing.TB, line []byte) response {
	tb.Helper()
	if !bytes.HasSuffix(line, []byte("\n")) || bytes.Count(line, []byte("\n")) != 1 {
		tb.Fatalf("response %q is not exactly one line", line)
	}
	var r response
	mustDecodeStrict(tb, line, &r)
	return r
}

// testLog returns a logger that writes into the test log.
func testLog(tb testing.TB) *log.Logger {
	tb.Helper()
	return log.New(tbWriter{tb}, "", 0)
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// newTool returns a tool with the test ref, the "network" grant required,
// and run as its Run.
func newTool(tb testing.TB, run func(context.Context, *handler.Call) (*handler.Result, error)) handler.Tool {
	tb.Helper()
	return handler.Tool{Ref: testRef, RequiredGrants: []string{"network"}, Run: run, ErrorLog: testLog(tb)}
}

// serveOne runs ServeOne on request and returns the decoded response.
func serveOne(tb testing.TB, tool handler.Tool, request []byte) response {
	tb.Helper()
	var out bytes.Buffer
	if err := handler.ServeOne(context.Background(), tool, bytes.NewReader(request), &out); err != nil {
		tb.Fatalf("ServeOne: %v", err)
	}
	r := parseLine(tb, out.Bytes())
	if r.CallID != nil {
		tb.Fatalf("one-shot response has call_id %q", *r.CallID)
	}
	return r
}

// echo is a Run that returns its input as output.
func echo(_ context.Context, c *handler.Call) (*handler.Result, error) {
	return handler.Output(c.Input), nil
}
