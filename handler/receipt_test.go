package handler_test

import (
	"fmt"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
)

func TestCheckReceipt(t *testing.T) {
	req := newRequest(t, `{"n":1}`, touba.RetryIdempotencyKey)
	e := req.Context.Effect
	for _, tt := range []struct {
		name string
		r    *handler.Receipt
		want string
	}{
		{"valid applied", &handler.Receipt{EffectID: e.EffectID, Fingerprint: e.Fingerprint, Outcome: "applied", ReceiptRef: "x"}, ""},
		{"valid not_applied", &handler.Receipt{EffectID: e.EffectID, Fingerprint: e.Fingerprint, Outcome: "not_applied"}, ""},
		{"valid unknown", &handler.Receipt{EffectID: e.EffectID, Fingerprint: e.Fingerprint, Outcome: "unknown"}, ""},
		{"missing", nil, touba.EEffectReceiptMissing},
		{"wrong id", &handler.Receipt{EffectID: "q-1:other", Fingerprint: e.Fingerprint, Outcome: "applied"}, touba.EEffectReceiptMismatch},
		{"wrong fingerprint", &handler.Receipt{EffectID: e.EffectID, Fingerprint: "sha256:00", Outcome: "applied"}, touba.EEffectReceiptMismatch},
		{"bad outcome", &handler.Receipt{EffectID: e.EffectID, Fingerprint: e.Fingerprint, Outcome: "done"}, touba.EEffectReceiptInvalid},
		{"no outcome", &handler.Receipt{EffectID: e.EffectID, Fingerprint: e.Fingerprint}, touba.EEffectReceiptInvalid},
		{"no id", &handler.Receipt{Fingerprint: e.Fingerprint, Outcome: "applied"}, touba.EEffectReceiptInvalid},
		{"no fingerprint", &handler.Receipt{EffectID: e.EffectID, Outcome: "applied"}, touba.EEffectReceiptInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := handler.CheckReceipt(req, tt.r); got != tt.want {
				t.Fatalf("CheckReceipt = %q, want %q", got, tt.want)
			}
		})
	}
	noEffect := newRequest(t, `{}`, "")
	if got := handler.CheckReceipt(noEffect, &handler.Receipt{EffectID: "call-1", Fingerprint: "sha256:any", Outcome: "applied"}); got != "" {
		t.Fatalf("receipt naming the call id: %q, want valid", got)
	}
}

func TestInterpret(t *testing.T) {
	req := newRequest(t, `{"n":1}`, touba.RetryIdempotencyKey)
	e := req.Context.Effect
	rcpt := func(id, fp, outcome string) string {
		return fmt.Sprintf(`{"effect_id":%q,"fingerprint":%q,"outcome":%q,"receipt_ref":"order:42"}`, id, fp, outcome)
	}
	good := rcpt(e.EffectID, e.Fingerprint, "applied")
	for _, tt := range []struct {
		name, doc                 string
		ok                        bool
		outcome, code, receiptErr string
		output                    string
	}{
		{"ok with receipt", `{"ok":true,"output":{"id":42},"effect_receipt":` + good + `}`, true, "applied", "", "", `{"id":42}`},
		{"ok without output", `{"ok":true,"effect_receipt":` + good + "}\n", true, "applied", "", "", `null`},
		{"ok, receipt missing", `{"ok":true,"output":1}`, false, "unknown", touba.EEffectReceiptMissing, touba.EEffectReceiptMissing, `1`},
		{"ok, receipt null", `{"ok":true,"output":1,"effect_receipt":null}`, false, "unknown", touba.EEffectReceiptMissing, touba.EEffectReceiptMissing, `1`},
		{"ok, wrong id", `{"ok":true,"effect_receipt":` + rcpt("q-9:x", e.Fingerprint, "applied") + `}`, false, "unknown", touba.EEffectReceiptMismatch, touba.EEffectReceiptMismatch, `null`},
		{"ok, wrong fingerprint", `{"ok":true,"effect_receipt":` + rcpt(e.EffectID, "sha256:beef", "applied") + `}`, false, "unknown", touba.EEffectReceiptMismatch, touba.EEffectReceiptMismatch, `null`},
		{"ok, bad outcome", `{"ok":true,"effect_receipt":` + rcpt(e.EffectID, e.Fingerprint, "maybe") + `}`, false, "unknown", touba.EEffectReceiptInvalid, touba.EEffectReceiptInvalid, `null`},
		{"ok, receipt not an object", `{"ok":true,"effect_receipt":"applied"}`, false, "unknown", touba.EEffectReceiptInvalid, touba.EEffectReceiptInvalid, `null`},
		{"ok, receipt field of wrong type", `{"ok":true,"effect_receipt":{"effect_id":1}}`, false, "unknown", touba.EEffectReceiptInvalid, touba.EEffectReceiptInvalid, `null`},
		{"business error, receipt in details", `{"ok":false,"error":{"code":"ExternalWriteRefused","message":"no","details":{"effect_receipt":` + rcpt(e.EffectID, e.Fingerprint, "not_applied") + `}}}`, false, "not_applied", "ExternalWriteRefused", "", ``},
		{"business error, receipt missing keeps its code", `{"ok":false,"error":{"code":"ExternalWriteRefused","message":"no"}}`, false, "unknown", "ExternalWriteRefused", touba.EEffectReceiptMissing, ``},
		{"business error, receipt invalid keeps its code", `{"ok":false,"error":{"code":"CardDeclined","message":"no","details":{"effect_receipt":{"outcome":"not_applied"}}}}`, false, "unknown", "CardDeclined", touba.EEffectReceiptInvalid, ``},
		{"business error, receipt at top level", `{"ok":false,"error":{"code":"CardDeclined","message":"no"},"effect_receipt":` + rcpt(e.EffectID, e.Fingerprint, "not_applied") + `}`, false, "not_applied", "CardDeclined", "", ``},
		{"not JSON", `hello`, false, "unknown", touba.EHandlerProtocolError, "", ``},
		{"empty", ``, false, "unknown", touba.EHandlerProtocolError, "", ``},
		{"two documents", `{"ok":true} {"ok":true}`, false, "unknown", touba.EHandlerProtocolError, "", ``},
		{"array", `[{"ok":true}]`, false, "unknown", touba.EHandlerProtocolError, "", ``},
		{"no ok", `{"output":1}`, false, "unknown", touba.EHandlerProtocolError, "", ``},
		{"ok not boolean", `{"ok":"yes"}`, false, "unknown", touba.EHandlerProtocolError, "", ``},
		{"ok false without error", `{"ok":false}`, false, "unknown", touba.EHandlerProtocolError, "", ``},
		{"error without code", `{"ok":false,"error":{"message":"x"}}`, false, "unknown", touba.EHandlerProtocolError, "", ``},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := handler.Interpret(req, []byte(tt.doc))
			if res.OK != tt.ok || res.Outcome != tt.outcome || errCode(res) != tt.code || res.ReceiptErrorCode != tt.receiptErr {
				t.Fatalf("result = ok %v outcome %q code %q receipt error %q; want ok %v outcome %q code %q receipt error %q",
					res.OK, res.Outcome, errCode(res), res.ReceiptErrorCode, tt.ok, tt.outcome, tt.code, tt.receiptErr)
			}
			if got := string(res.Output); got != tt.output {
				t.Fatalf("output = %s, want %s", got, tt.output)
			}
			if !res.Dispatched {
				t.Fatal("Dispatched = false")
			}
		})
	}
}

func TestInterpretWithoutEffectIgnoresReceipts(t *testing.T) {
	req := newRequest(t, `{}`, "")
	res := handler.Interpret(req, []byte(`{"ok":true,"output":2}`))
	if !res.OK || res.Outcome != "" || res.ReceiptErrorCode != "" || res.Err != nil {
		t.Fatalf("result = %+v", res)
	}
	res = handler.Interpret(req, []byte(`{"ok":false,"error":{"code":"NotFound","message":"x"}}`))
	if res.OK || res.Outcome != "" || errCode(res) != "NotFound" {
		t.Fatalf("result = %+v", res)
	}
}
