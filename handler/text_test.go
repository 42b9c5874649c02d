package handler_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
)

// storable reports whether s is valid UTF-8 without NUL: what a PostgreSQL
// text column takes.
func storable(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// TestInterpretMakesTextStorable: an answer whose output holds bytes that
// are not UTF-8 (inside a JSON string, where jsonx.Valid lets them pass)
// keeps its outcome (an applied write stays applied, never a protocol
// error) and its output comes out valid JSON with \ufffd for each such
// byte, as encoding/json marshals it; an escaped \u0000 stays as written;
// NUL in the receipt ref, error code and message becomes U+FFFD.
func TestInterpretMakesTextStorable(t *testing.T) {
	req := newRequest(t, `{"n":1}`, touba.RetryNone)
	e := req.Context.Effect
	rcpt := func(outcome, ref string) string {
		return fmt.Sprintf(`{"effect_id":%q,"fingerprint":%q,"outcome":%q,"receipt_ref":"%s"}`, e.EffectID, e.Fingerprint, outcome, ref)
	}
	for _, tt := range []struct {
		name, doc     string
		ok            bool
		outcome, code string
		output, ref   string
		message       string
	}{
		{"applied, raw byte in output", `{"ok":true,"output":{"name":"caf` + "\xe9" + `"},"effect_receipt":` + rcpt("applied", "order:42") + `}`,
			true, "applied", "", `{"name":"caf\ufffd"}`, "order:42", ""},
		{"applied, a run of bad bytes is one \\ufffd each", `{"ok":true,"output":["` + "\xff\xfe\xc3" + `ok"],"effect_receipt":` + rcpt("applied", "r") + `}`,
			true, "applied", "", `["\ufffd\ufffd\ufffdok"]`, "r", ""},
		{"applied, escaped NUL kept", `{"ok":true,"output":"a\u0000b","effect_receipt":` + rcpt("applied", "r") + `}`,
			true, "applied", "", `"a\u0000b"`, "r", ""},
		{"applied, NUL and bad byte in receipt ref", `{"ok":true,"output":1,"effect_receipt":` + rcpt("applied", `order:\u0000`+"\xe9") + `}`,
			true, "applied", "", `1`, "order:\uFFFD\uFFFD", ""},
		{"business error with NUL", `{"ok":false,"error":{"code":"Bad\u0000","message":"m\u0000` + "\xe9" + `","details":{"effect_receipt":` + rcpt("not_applied", "") + `}}}`,
			false, "not_applied", "Bad\uFFFD", ``, "", "m\uFFFD\uFFFD"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := handler.Interpret(req, []byte(tt.doc))
			if res.OK != tt.ok || res.Outcome != tt.outcome || errCode(res) != tt.code {
				t.Fatalf("result = ok %v outcome %q code %q (%v); want ok %v outcome %q code %q",
					res.OK, res.Outcome, errCode(res), res.Err, tt.ok, tt.outcome, tt.code)
			}
			if got := string(res.Output); got != tt.output {
				t.Fatalf("output = %s, want %s", got, tt.output)
			}
			if len(res.Output) > 0 && (!json.Valid(res.Output) || !utf8.Valid(res.Output)) {
				t.Fatalf("output %q is not valid UTF-8 JSON", res.Output)
			}
			if res.ReceiptRef != tt.ref || !storable(res.ReceiptRef) {
				t.Fatalf("receipt ref = %q, want %q", res.ReceiptRef, tt.ref)
			}
			if res.Err != nil && (res.Err.Message != tt.message || !storable(res.Err.Code) || !storable(res.Err.Message)) {
				t.Fatalf("error = %q %q, want message %q", res.Err.Code, res.Err.Message, tt.message)
			}
		})
	}
	// A step without effects: the same repair, so its checkpoint saves.
	res := handler.Interpret(newRequest(t, `{}`, ""), []byte(`{"ok":true,"output":{"v":"`+"\xe9\xff"+`"}}`))
	if !res.OK || string(res.Output) != `{"v":"\ufffd\ufffd"}` {
		t.Fatalf("no-effect result = %+v, output %s", res, res.Output)
	}
}
