package handler

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// SignatureHeader is the header in which touba-trigger sends the signature
// of a webhook handler's request (SPEC §2.2).
const SignatureHeader = "X-Signature"

// ErrSignature is the error every refused signature matches with
// errors.Is; the three below say why.
var ErrSignature = errors.New("webhook signature invalid")

// The reasons Verify refuses a signature. Each matches ErrSignature.
var (
	ErrSignatureMissing   = fmt.Errorf("%w: no %s header", ErrSignature, SignatureHeader)
	ErrSignatureMalformed = fmt.Errorf("%w: %s is not sha256=<64 hex digits>", ErrSignature, SignatureHeader)
	ErrSignatureMismatch  = fmt.Errorf("%w: %s does not match the body and the secret", ErrSignature, SignatureHeader)
)

// ErrNoSecret is returned by Verify for an empty secret: without one there
// is nothing to check against, and nothing is accepted.
var ErrNoSecret = errors.New("handler: no webhook secret")

// Verify checks signatureHeader, the X-Signature value of a request from a
// touba-trigger webhook binding, against body and the binding's shared
// secret (its credentials.hmac_secret, as the daemon resolved it: a secret
// file's trailing newline is not part of it).
//
// What is signed is exactly the raw request body as it arrived, every byte,
// before any JSON parsing or re-encoding: the header is "sha256=" followed by
// the hex HMAC-SHA256 of the body keyed with the secret's bytes. The daemon
// writes the hex in lowercase; either case is accepted, as is space around
// the value. The comparison is in constant time. Verify returns nil, or an
// error matching ErrSignature (ErrSignatureMissing, ErrSignatureMalformed or
// ErrSignatureMismatch), or ErrNoSecret.
//
// The same value comes from
//
//	printf '%s' "$BODY" | openssl dgst -sha256 -hmac "$SECRET"
//
// The signature covers the body only, not the Idempotency-Key header nor
// the time: a captured request can be sent again, so the tool must
// deduplicate by its effect_id (HTTPHandler checks that the header matches).
func Verify(body []byte, signatureHeader, secret string) error {
	if secret == "" {
		return ErrNoSecret
	}
	v := strings.TrimSpace(signatureHeader)
	if v == "" {
		return ErrSignatureMissing
	}
	hexSig, ok := strings.CutPrefix(v, "sha256=")
	if !ok || len(hexSig) != 2*sha256.Size {
		return ErrSignatureMalformed
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return ErrSignatureMalformed
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	if !hmac.Equal(got, m.Sum(nil)) {
		return ErrSignatureMismatch
	}
	return nil
}
