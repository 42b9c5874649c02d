package handler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"testing"

	"github.com/touba/touba-trigger/sdk/handler"
)

// fuzzTool answers every call with a bound receipt, so the fuzzers can
// check that no input makes a receipt for an identity the request lacks.
func fuzzTool() handler.Tool {
	return handler.Tool{
		Ref: testRef, RequiredGrants: []string{"network"}, ErrorLog: log.New(io.Discard, "", 0),
		Run: func(_ context.Context, c *handler.Call) (*handler.Result, error) {
			if bytes.Contains(c.Input, []byte("fail")) {
				return nil, handler.Errorf("Refused", "no").WithReceipt(c.Receipt(handler.NotApplied, ""))
			}
			if bytes.Contains(c.Input, []byte("panic")) {
				panic("fuzz")
			}
			return handler.Output(c.Input).WithReceipt(c.Receipt(handler.Applied, "r")), nil
		},
	}
}

func addSeeds(f *testing.F) {
	for _, effect := range []bool{false, true} {
		for _, in := range []any{nil, "fail", "panic", map[string]any{"a": []int{1}}} {
			f.Add(mustJSON(f, newRequest("c1", in, effect)))
		}
	}
	f.Add([]byte(`{"protocol":"touba-tool-handler-v1","operation":"invoke","tool_ref":"tool:sdk.test/Echo","context":{"grants":["network"],"effect":{"effect_id":"e","fingerprint":"f"}}}`))
	f.Add([]byte(`{"protocol":1}`))
	f.Add([]byte(`null`))
	f.Add([]byte(``))
}

// checkResponse checks one answer against the request it answers.
func checkResponse(t *testing.T, request []byte, r response) {
	t.Helper()
	if r.OK == (r.Error != nil) || (r.Error != nil && r.Error.Code == "") {
		t.Fatalf("ok=%v error=%+v", r.OK, r.Error)
	}
	var req struct {
		Protocol string `json:"protocol"`
		ToolRef  string `json:"tool_ref"`
		Context  struct {
			Effect *struct {
				EffectID    string `json:"effect_id"`
				Fingerprint string `json:"fingerprint"`
			} `json:"effect"`
		} `json:"context"`
	}
	parsed := json.NewDecoder(bytes.NewReader(request)).Decode(&req) == nil
	if r.OK && (!parsed || req.Protocol != handler.Protocol || req.ToolRef != testRef) {
		t.Fatalf("ok answer to a request that is not for this tool: %q", request)
	}
	rc := r.EffectReceipt
	if !r.OK {
		rc = r.errorReceipt(t)
	}
	if rc == nil {
		return
	}
	if !parsed || req.Context.Effect == nil || rc.EffectID == "" || rc.Fingerprint == "" ||
		rc.EffectID != req.Context.Effect.EffectID || rc.Fingerprint != req.Context.Effect.Fingerprint {
		t.Fatalf("receipt %+v for request %q", rc, request)
	}
}

// FuzzServeOne feeds arbitrary bytes to a one-shot handler: it must answer
// with exactly one valid response line, and any receipt must be bound to
// the request's own effect.
func FuzzServeOne(f *testing.F) {
	addSeeds(f)
	tool := fuzzTool()
	f.Fuzz(func(t *testing.T, request []byte) {
		var out bytes.Buffer
		if err := handler.ServeOne(context.Background(), tool, bytes.NewReader(request), &out); err != nil {
			t.Fatalf("ServeOne: %v", err)
		}
		checkResponse(t, request, parseLine(t, out.Bytes()))
	})
}

// FuzzServePersistent feeds an arbitrary line to a persistent handler:
// every non-blank line gets exactly one answer with a call_id.
func FuzzServePersistent(f *testing.F) {
	addSeeds(f)
	tool := fuzzTool()
	f.Fuzz(func(t *testing.T, request []byte) {
		if bytes.ContainsAny(request, "\n") {
			t.Skip("one line per request")
		}
		var out bytes.Buffer
		if err := handler.ServePersistent(context.Background(), tool, bytes.NewReader(request), &out); err != nil {
			t.Fatalf("ServePersistent: %v", err)
		}
		if len(bytes.TrimSpace(request)) == 0 {
			if out.Len() != 0 {
				t.Fatalf("answered a blank line: %q", out.Bytes())
			}
			return
		}
		r := parseLine(t, out.Bytes())
		if r.CallID == nil {
			t.Fatalf("no call_id in %q", out.Bytes())
		}
		checkResponse(t, request, r)
	})
}
