package sdkhttp_test

import (
	"testing"

	"github.com/touba/touba-trigger/sdk/handler"
	"github.com/touba/touba-trigger/verify"
)

// The published cross-check of the SDK tests (sdk/handler/verify_test.go,
// sdk/js/test/http.test.js, sdk/python/tests/test_http.py), computed by
//
//	printf '%s' '{"tool_ref":"tool:sdk.test/Echo","input":{"note":"café ✓"}}' \
//	  | openssl dgst -sha256 -hmac 'whsec-cross-check-2f7d'
//
// is also what the daemon's own signer writes as X-Signature: the daemon,
// openssl and the three SDKs agree on the bytes signed.
func TestDaemonSignsTheCrossCheck(t *testing.T) {
	const (
		body = `{"tool_ref":"tool:sdk.test/Echo","input":{"note":"café ✓"}}`
		key  = "whsec-cross-check-2f7d"
		sig  = "sha256=0ccc32aa8c680aaf8c10389be3f71dd438405a7f5ed35b6c37172f5c6776fb20"
	)
	if got := verify.Sign([]byte(key), []byte(body)); got != sig {
		t.Fatalf("verify.Sign = %s, want the openssl value %s", got, sig)
	}
	if err := handler.Verify([]byte(body), sig, key); err != nil {
		t.Fatalf("handler.Verify: %v", err)
	}
}
