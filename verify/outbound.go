package verify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// OutboundHeader is the header that carries the signature of an outbound
// webhook (and of the generic inbound hmac-sha256 scheme by default).
const OutboundHeader = "X-Signature"

// ErrSignature is returned for a missing, malformed or wrong signature.
var ErrSignature = errors.New("signature invalid")

// mac is the one HMAC-SHA256 code path: inbound schemes and outbound
// signing both call it.
func mac(secret []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, secret)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// Sign returns the X-Signature value for an outbound webhook body:
// "sha256=" followed by the lowercase hex HMAC-SHA256 of the raw body,
// which may be given in pieces (signed as their concatenation).
func Sign(secret []byte, body ...[]byte) string {
	return "sha256=" + hex.EncodeToString(mac(secret, body...))
}

// Verify checks an X-Signature header value against the raw body. It is the
// reference implementation for receivers of touba-trigger's outbound
// webhooks: import it, or do exactly what it does. The comparison is in
// constant time.
func Verify(secret, body []byte, signatureHeader string) error {
	hexSig, ok := strings.CutPrefix(strings.TrimSpace(signatureHeader), "sha256=")
	if !ok {
		return ErrSignature
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil || len(got) != sha256.Size {
		return ErrSignature
	}
	if !hmac.Equal(got, mac(secret, body)) {
		return ErrSignature
	}
	return nil
}
