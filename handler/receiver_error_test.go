package handler

import "testing"

// A refusal's body names the receiver's reason where it gives one in a
// shape an operator reads: our protocol's error (the SDKs' 401), and the
// common error objects of HTTP APIs; anything else adds nothing.
func TestReceiverError(t *testing.T) {
	for body, want := range map[string]string{
		`{"ok": false, "error": {"code": "SignatureInvalid", "message": "X-Signature does not match the body"}}`: ": SignatureInvalid: X-Signature does not match the body",
		`{"error": {"type": "invalid_request_error", "message": "No such customer"}}`:                            ": invalid_request_error: No such customer",
		`{"error": {"code": 4012}}`:                          ": 4012",
		`{"error": "token expired"}`:                         ": token expired",
		`{"error": {"code": "has spaces", "message": "m"}}`:  ": m",
		`{"error": {"code": "x", "message": "line\nbreak"}}`: ": x: line break",
		`<html>401 Unauthorized</html>`:                      "",
		`{"detail": "nope"}`:                                 "",
		``:                                                   "",
	} {
		if got := receiverError([]byte(body)); got != want {
			t.Errorf("%s: %q, want %q", body, got, want)
		}
	}
}
