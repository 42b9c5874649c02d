package handler_test

import (
	"encoding/json"
	"testing"

	"github.com/touba/touba-trigger/internal/gobuild"

	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/protocol"
)

// The test handler programs, built once by TestMain: fixture (one-shot,
// standard library), pfixture (persistent, standard library) and sdkecho
// (the Go SDK, either mode).
var fixture, pfixture, sdkecho string

func TestMain(m *testing.M) {
	gobuild.Main(m, map[string]*string{
		"./testdata/fixture": &fixture, "./testdata/persistent": &pfixture, "./testdata/sdkecho": &sdkecho,
	})
}

const testTool = "tool:test/Echo"

// newRequest returns a request for testTool; with retryMode set it carries
// an effect, as an external_write binding's call does.
func newRequest(tb testing.TB, input, retryMode string) *handler.Request {
	tb.Helper()
	req := &handler.Request{
		Protocol:  protocol.Name,
		Operation: protocol.Invoke,
		ToolRef:   testTool,
		Input:     json.RawMessage(input),
		Context: handler.Context{
			TriggerRef: "trigger:test/Orders", EventID: "ev-1", QueueID: "q-1",
			RunID: "run-1", CallID: "call-1", Attempt: 1, Grants: []string{},
		},
	}
	if retryMode != "" {
		fp, err := handler.Fingerprint(req.ToolRef, string(req.Operation), req.Input)
		if err != nil {
			tb.Fatal(err)
		}
		req.Context.Effect = &handler.Effect{Scope: "q-1", EffectID: "q-1:create", Fingerprint: fp, RetryMode: retryMode, Attempt: 1}
	}
	return req
}

// hook counts the calls of a dispatched hook and returns err from it.
type hook struct {
	n   int
	err error
}

func (h *hook) fn() error {
	h.n++
	return h.err
}

// errCode is the code of a Result's error, or "".
func errCode(r *handler.Result) string {
	if r.Err == nil {
		return ""
	}
	return r.Err.Code
}
