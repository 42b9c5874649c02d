package handler_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/touba/touba-trigger/sdk/handler"
)

const httpSecret = "whsec-sdk-http-test"

// httpTool is a tool that counts its runs and answers an applied receipt
// whose ref is the idempotency key it saw, or the business error the input
// asks for.
func httpTool(tb testing.TB, runs *atomic.Int32) handler.Tool {
	return newTool(tb, func(_ context.Context, c *handler.Call) (*handler.Result, error) {
		runs.Add(1)
		var in struct {
			Fail string `json:"fail"`
		}
		if err := c.Decode(&in); err != nil {
			return nil, handler.Errorf("BadInput", "%v", err)
		}
		if in.Fail != "" {
			return nil, handler.Errorf(in.Fail, "refused").WithReceipt(c.Receipt(handler.NotApplied, ""))
		}
		return handler.Output(map[string]string{"key": c.Context.IdempotencyKey}).
			WithReceipt(c.Receipt(handler.Applied, "ref:"+c.Context.IdempotencyKey)), nil
	})
}

// post sends body to h as the daemon would: signed with secret (unless
// sig is set) and with Idempotency-Key key (unless empty).
func post(tb testing.TB, h http.Handler, method string, body []byte, sig, key string) (int, response) {
	tb.Helper()
	req := httptest.NewRequest(method, "/hook", bytes.NewReader(body))
	if sig != "-" {
		if sig == "" {
			sig = sign(httpSecret, body)
		}
		req.Header.Set("X-Signature", sig)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		tb.Fatalf("Content-Type %q", ct)
	}
	// The header is what tells the daemon the body is a protocol response.
	if got := rec.Header().Get("Touba-Protocol"); got != "touba-tool-handler-v1" {
		tb.Fatalf("Touba-Protocol %q, want touba-tool-handler-v1", got)
	}
	return rec.Code, parseLine(tb, rec.Body.Bytes())
}

func TestHTTPHandler(t *testing.T) {
	var runs atomic.Int32
	h := handler.HTTPHandler(httpTool(t, &runs), handler.WithSecret(httpSecret), handler.WithMaxBodyBytes(4096))
	call := mustJSON(t, newRequest("c1", map[string]any{}, true))
	failing := mustJSON(t, newRequest("c2", map[string]any{"fail": "ExternalWriteRefused"}, true))
	noEffect := mustJSON(t, newRequest("c3", map[string]any{}, false))
	big := mustJSON(t, newRequest("c4", map[string]any{"pad": strings.Repeat("x", 5000)}, true))
	for _, tc := range []struct {
		name      string
		method    string
		body      []byte
		sig, key  string
		status    int
		code      string // "" for ok
		ran       bool
		receipt   string // outcome of the receipt in the answer
		receiptOf string
	}{
		{name: "applied", method: "POST", body: call, key: "q1:c1", status: 200, ran: true, receipt: "applied", receiptOf: "ref:q1:c1"},
		{name: "no idempotency header", method: "POST", body: call, status: 200, ran: true, receipt: "applied", receiptOf: "ref:"},
		{name: "no effect, call_id as key", method: "POST", body: noEffect, key: "c3", status: 200, ran: true},
		{name: "business error keeps its code", method: "POST", body: failing, key: "q1:c2", status: 200,
			code: "ExternalWriteRefused", ran: true, receipt: "not_applied"},
		{name: "GET", method: "GET", body: nil, sig: "-", status: 405, code: handler.CodeMethodNotAllowed},
		{name: "unsigned", method: "POST", body: call, sig: "-", key: "q1:c1", status: 401, code: handler.CodeSignatureInvalid},
		{name: "malformed signature", method: "POST", body: call, sig: "sha256=xyz", status: 401, code: handler.CodeSignatureInvalid},
		{name: "tampered body", method: "POST", body: bytes.Replace(call, []byte(`"c1"`), []byte(`"c9"`), 1),
			sig: sign(httpSecret, call), status: 401, code: handler.CodeSignatureInvalid},
		{name: "other secret", method: "POST", body: call, sig: sign("other", call), status: 401, code: handler.CodeSignatureInvalid},
		{name: "too large", method: "POST", body: big, status: 413, code: handler.CodePayloadTooLarge},
		{name: "not JSON", method: "POST", body: []byte("{nope"), status: 400, code: handler.CodeProtocolError},
		{name: "other protocol", method: "POST", body: bytes.Replace(call, []byte(handler.Protocol), []byte("v0"), 1),
			status: 400, code: handler.CodeProtocolError},
		{name: "idempotency key not the effect id", method: "POST", body: call, key: "q1:other", status: 400, code: handler.CodeProtocolError},
		{name: "idempotency key not the call id", method: "POST", body: noEffect, key: "c9", status: 400, code: handler.CodeProtocolError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := runs.Load()
			status, resp := post(t, h, tc.method, tc.body, tc.sig, tc.key)
			if status != tc.status || resp.code() != tc.code {
				t.Fatalf("answer %d %q, want %d %q: %+v", status, resp.code(), tc.status, tc.code, resp.Error)
			}
			if got := runs.Load() - before; got != map[bool]int32{true: 1, false: 0}[tc.ran] {
				t.Fatalf("tool ran %d times, want ran=%v", got, tc.ran)
			}
			rc := resp.EffectReceipt
			if rc == nil {
				rc = resp.errorReceipt(t)
			}
			switch {
			case tc.receipt == "" && rc != nil:
				t.Fatalf("unexpected receipt %+v", rc)
			case tc.receipt != "" && (rc == nil || rc.Outcome != tc.receipt):
				t.Fatalf("receipt %+v, want outcome %s", rc, tc.receipt)
			case tc.receiptOf != "" && rc.ReceiptRef != tc.receiptOf:
				t.Fatalf("receipt_ref %q, want %q", rc.ReceiptRef, tc.receiptOf)
			}
		})
	}
}

func TestHTTPHandlerSecretFromEnv(t *testing.T) {
	var runs atomic.Int32
	t.Setenv(handler.SecretEnv, httpSecret)
	h := handler.HTTPHandler(httpTool(t, &runs))
	if status, resp := post(t, h, "POST", mustJSON(t, newRequest("c1", map[string]any{}, true)), "", "q1:c1"); status != 200 || !resp.OK {
		t.Fatalf("answer %d %+v", status, resp.Error)
	}
	t.Setenv(handler.SecretEnv, "")
	defer func() {
		if v := recover(); v == nil || !strings.Contains(v.(string), handler.SecretEnv) {
			t.Fatalf("HTTPHandler without a secret: recovered %v, want a panic naming %s", v, handler.SecretEnv)
		}
	}()
	handler.HTTPHandler(httpTool(t, &runs))
}
