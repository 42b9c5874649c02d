package handler_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/sdk/handler"
)

// The published cross-check, the same literal in the JS and Python SDK
// tests. The signature was computed by openssl, not by the SDK:
//
//	printf '%s' '{"tool_ref":"tool:sdk.test/Echo","input":{"note":"café ✓"}}' \
//	  | openssl dgst -sha256 -hmac 'whsec-cross-check-2f7d'
//
// The body is UTF-8 ("é" is c3 a9): the bytes are signed, not characters.
const (
	crossBody   = `{"tool_ref":"tool:sdk.test/Echo","input":{"note":"café ✓"}}`
	crossSecret = "whsec-cross-check-2f7d"
	crossSig    = "sha256=0ccc32aa8c680aaf8c10389be3f71dd438405a7f5ed35b6c37172f5c6776fb20"
)

func TestVerifyOpenSSLCrossCheck(t *testing.T) {
	if err := handler.Verify([]byte(crossBody), crossSig, crossSecret); err != nil {
		t.Fatalf("Verify(openssl signature) = %v, want nil", err)
	}
}

// sign is the test's own signer, written from SPEC §2.2 rather than taken
// from the SDK.
func sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

func TestVerify(t *testing.T) {
	body := []byte(crossBody)
	good := sign(crossSecret, body)
	hexPart := strings.TrimPrefix(good, "sha256=")
	for _, tc := range []struct {
		name, header, secret string
		body                 []byte
		want                 error // nil, or the sentinel errors.Is must match
	}{
		{"valid", good, crossSecret, body, nil},
		{"uppercase hex", "sha256=" + strings.ToUpper(hexPart), crossSecret, body, nil},
		{"space around", "  " + good + " ", crossSecret, body, nil},
		{"missing", "", crossSecret, body, handler.ErrSignatureMissing},
		{"blank", "   ", crossSecret, body, handler.ErrSignatureMissing},
		{"no prefix", hexPart, crossSecret, body, handler.ErrSignatureMalformed},
		{"other algorithm", "sha1=" + hexPart, crossSecret, body, handler.ErrSignatureMalformed},
		{"prefix case", "SHA256=" + hexPart, crossSecret, body, handler.ErrSignatureMalformed},
		{"short", good[:len(good)-2], crossSecret, body, handler.ErrSignatureMalformed},
		{"long", good + "00", crossSecret, body, handler.ErrSignatureMalformed},
		{"not hex", good[:len(good)-1] + "g", crossSecret, body, handler.ErrSignatureMalformed},
		{"two values", good + "," + good, crossSecret, body, handler.ErrSignatureMalformed},
		{"wrong secret", good, crossSecret + "x", body, handler.ErrSignatureMismatch},
		{"body changed", good, crossSecret, append([]byte(crossBody), ' '), handler.ErrSignatureMismatch},
		{"body re-encoded", good, crossSecret, []byte(strings.ReplaceAll(crossBody, "é", `\u00e9`)), handler.ErrSignatureMismatch},
		{"empty secret", good, "", body, handler.ErrNoSecret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := handler.Verify(tc.body, tc.header, tc.secret)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Verify = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
			if tc.want != handler.ErrNoSecret && !errors.Is(err, handler.ErrSignature) {
				t.Fatalf("Verify = %v, does not match ErrSignature", err)
			}
		})
	}
}

func FuzzVerify(f *testing.F) {
	f.Add([]byte(crossBody), crossSig)
	f.Add([]byte("{}"), "sha256=zz")
	f.Fuzz(func(t *testing.T, body []byte, header string) {
		err := handler.Verify(body, header, crossSecret)
		if err == nil && header != sign(crossSecret, body) &&
			!strings.EqualFold(strings.TrimSpace(header), sign(crossSecret, body)) {
			t.Fatalf("Verify accepted %q for %q", header, body)
		}
		if err != nil && !errors.Is(err, handler.ErrSignature) {
			t.Fatalf("Verify = %v, not an ErrSignature", err)
		}
	})
}
