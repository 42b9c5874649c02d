package verify_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/touba/touba-trigger/verify"
)

func TestOutboundSignVerify(t *testing.T) {
	secret, body := []byte("outbound-secret"), []byte(`{"event":"done"}`)
	sig := verify.Sign(secret, body)
	if err := verify.Verify(secret, body, sig); err != nil {
		t.Fatalf("Verify(Sign)=%v", err)
	}
	for _, tc := range []struct {
		name         string
		secret, body []byte
		header       string
	}{
		{"tampered body", secret, []byte(`{"event":"dome"}`), sig},
		{"wrong secret", []byte("other"), body, sig},
		{"no prefix", secret, body, sig[len("sha256="):]},
		{"short", secret, body, sig[:len(sig)-2]},
		{"not hex", secret, body, "sha256=" + nonHex64},
		{"empty", secret, body, ""},
	} {
		if err := verify.Verify(tc.secret, tc.body, tc.header); !errors.Is(err, verify.ErrSignature) {
			t.Errorf("%s: err=%v, want ErrSignature", tc.name, err)
		}
	}
}

// A receiver configured with the inbound hmac-sha256 scheme accepts what
// touba-trigger signs outbound: both go through the one HMAC code path.
func TestOutboundAcceptedByInbound(t *testing.T) {
	body := []byte(`{"n":1}`)
	h := http.Header{}
	h.Set(verify.OutboundHeader, verify.Sign([]byte("shared"), body))
	v := mustNew(t, verify.Config{Scheme: verify.SchemeHMACSHA256, Secrets: []string{"shared"}})
	checkErr(t, v.Verify(h, body, t0), nil)
}
