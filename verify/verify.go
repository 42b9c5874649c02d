package verify

import (
	"crypto/hmac"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Inbound signature schemes, as named by source.verify.scheme (SPEC §2.1).
const (
	SchemeHMACSHA256       = "hmac-sha256"
	SchemeGitHub           = "github"
	SchemeStripe           = "stripe"
	SchemeStandardWebhooks = "standard-webhooks"
	SchemeSlack            = "slack"
	SchemeShopify          = "shopify"
)

// Encodings of the hmac-sha256 scheme's signature (Config.Encoding).
const (
	EncodingHex    = "hex"
	EncodingBase64 = "base64"
)

// DefaultPrefix is what precedes the hmac-sha256 scheme's signature when
// Config.Prefix is nil.
const DefaultPrefix = sha256Prefix

// maxPrefix bounds Config.Prefix; real senders use a few bytes ("sha256=",
// "v1=").
const maxPrefix = 32

// DefaultTolerance is how far a signed timestamp may be from the arrival
// time, in either direction, when Config.Tolerance is zero.
const DefaultTolerance = 300 * time.Second

// Reasons for a rejected request. Each wraps ErrSignature, so callers that
// only map to 401 TriggerSignatureInvalid test errors.Is(err, ErrSignature);
// the reason is for the delivery log and for tests.
var (
	ErrMissing   = fmt.Errorf("%w: missing header", ErrSignature)
	ErrMalformed = fmt.Errorf("%w: malformed", ErrSignature)
	ErrTimestamp = fmt.Errorf("%w: timestamp outside tolerance", ErrSignature)
	ErrNoMatch   = fmt.Errorf("%w: no signature matches", ErrSignature)
)

// Config describes how one trigger's deliveries are signed.
type Config struct {
	Scheme    string
	Header    string        // hmac-sha256 only; "" means X-Signature
	Encoding  string        // hmac-sha256 only; "" means hex
	Prefix    *string       // hmac-sha256 only; nil means "sha256=", "" none
	Secrets   []string      // resolved secret values, at least one
	Tolerance time.Duration // 0 means 300s
}

// Verifier checks the signatures of one trigger's deliveries. It is safe for
// concurrent use: it holds only the decoded keys.
type Verifier struct {
	scheme    string
	header    string   // canonical signature header of hmac-sha256
	encoding  string   // EncodingHex or EncodingBase64, for hmac-sha256
	prefix    string   // what precedes the signature, for hmac-sha256
	keys      [][]byte // HMAC keys, in the order of Config.Secrets
	tolerance time.Duration
}

// Known reports whether scheme names an inbound scheme.
func Known(scheme string) bool {
	switch scheme {
	case SchemeHMACSHA256, SchemeGitHub, SchemeStripe, SchemeStandardWebhooks, SchemeSlack, SchemeShopify:
		return true
	}
	return false
}

// New validates cfg and returns its verifier. Its errors are plain, short
// and lowercase, for the program loader to place (file, JSON path) and mark
// as a config error; they never contain a secret value.
func New(cfg Config) (*Verifier, error) {
	if !Known(cfg.Scheme) {
		return nil, fmt.Errorf("unknown scheme %q (want one of %s)", cfg.Scheme, SchemeList)
	}
	v := &Verifier{scheme: cfg.Scheme, tolerance: cfg.Tolerance}
	if v.tolerance == 0 {
		v.tolerance = DefaultTolerance
	}
	if v.tolerance < 0 {
		return nil, fmt.Errorf("negative tolerance %s", cfg.Tolerance)
	}
	switch {
	case cfg.Scheme == SchemeHMACSHA256 && cfg.Header == "":
		v.header = OutboundHeader
	case cfg.Scheme == SchemeHMACSHA256:
		if !isToken(cfg.Header) {
			return nil, fmt.Errorf("header %q is not a valid header name", cfg.Header)
		}
		v.header = http.CanonicalHeaderKey(cfg.Header)
	case cfg.Header != "":
		// The other schemes have fixed header names; a name here is a
		// mistake in the program that would otherwise go unnoticed.
		return nil, fmt.Errorf("header is only configurable for scheme %s", SchemeHMACSHA256)
	}
	if err := v.setFormat(cfg); err != nil {
		return nil, err
	}
	if len(cfg.Secrets) == 0 {
		return nil, fmt.Errorf("scheme %s needs at least one secret", cfg.Scheme)
	}
	for i, s := range cfg.Secrets {
		key, err := decodeSecret(cfg.Scheme, s)
		if err != nil {
			return nil, fmt.Errorf("secret %d: %v", i+1, err)
		}
		v.keys = append(v.keys, key)
	}
	return v, nil
}

// SchemeList names every inbound scheme, for messages.
const SchemeList = SchemeHMACSHA256 + ", " + SchemeGitHub + ", " + SchemeStripe + ", " +
	SchemeStandardWebhooks + ", " + SchemeSlack + ", " + SchemeShopify

// setFormat checks and records the encoding and prefix of hmac-sha256.
// The other schemes have a fixed format, so either option there is refused.
func (v *Verifier) setFormat(cfg Config) error {
	if cfg.Scheme != SchemeHMACSHA256 {
		switch {
		case cfg.Encoding != "":
			return fmt.Errorf("encoding is only configurable for scheme %s", SchemeHMACSHA256)
		case cfg.Prefix != nil:
			return fmt.Errorf("prefix is only configurable for scheme %s", SchemeHMACSHA256)
		}
		return nil
	}
	switch cfg.Encoding {
	case "", EncodingHex:
		v.encoding = EncodingHex
	case EncodingBase64:
		v.encoding = EncodingBase64
	default:
		return fmt.Errorf("unknown encoding %q (want %s or %s)", cfg.Encoding, EncodingHex, EncodingBase64)
	}
	v.prefix = DefaultPrefix
	if cfg.Prefix != nil {
		if err := CheckPrefix(*cfg.Prefix); err != nil {
			return err
		}
		v.prefix = *cfg.Prefix
	}
	return nil
}

// CheckPrefix reports whether p can be an hmac-sha256 prefix: at most 32
// bytes of visible ASCII, no spaces (the header value is trimmed before the
// prefix is matched, so a space at either end could never match). "" is
// valid and means no prefix.
func CheckPrefix(p string) error {
	if len(p) > maxPrefix {
		return fmt.Errorf("prefix is longer than %d bytes", maxPrefix)
	}
	for i := 0; i < len(p); i++ {
		if p[i] <= ' ' || p[i] > '~' {
			return errors.New("prefix must be visible ASCII without spaces")
		}
	}
	return nil
}

// decodeSecret turns a configured secret into the HMAC key. Only Standard
// Webhooks encodes its key; Stripe's whsec_ secrets are used as they are,
// prefix included, which is what Stripe's own libraries do.
func decodeSecret(scheme, s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("empty")
	}
	if scheme != SchemeStandardWebhooks {
		return []byte(s), nil
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
	if err != nil {
		return nil, errors.New("not whsec_ followed by standard base64")
	}
	if len(key) == 0 {
		return nil, errors.New("empty key after whsec_")
	}
	return key, nil
}

// Scheme returns the verifier's scheme.
func (v *Verifier) Scheme() string { return v.scheme }

// Verify checks one request: header is the request's header, body the raw
// bytes, at the arrival time. Every failure wraps ErrSignature and one of
// the reasons above; no message contains a secret.
func (v *Verifier) Verify(header http.Header, body []byte, at time.Time) error {
	switch v.scheme {
	case SchemeHMACSHA256:
		return v.verifyBody(header, v.header, v.encoding, v.prefix, body)
	case SchemeGitHub:
		return v.verifyBody(header, GitHubHeader, EncodingHex, sha256Prefix, body)
	case SchemeShopify:
		return v.verifyBody(header, ShopifyHeader, EncodingBase64, "", body)
	case SchemeStripe:
		return v.verifyStripe(header, body, at)
	case SchemeStandardWebhooks:
		return v.verifyStandard(header, body, at)
	case SchemeSlack:
		return v.verifySlack(header, body, at)
	}
	// New refuses unknown schemes, so only a zero Verifier gets here.
	return fmt.Errorf("%w: verifier has no scheme", ErrSignature)
}

// match reports whether any candidate signature is the HMAC of parts under
// any key. It computes one HMAC per key and compares in constant time.
func (v *Verifier) match(candidates [][]byte, parts ...[]byte) error {
	for _, key := range v.keys {
		want := mac(key, parts...)
		for _, c := range candidates {
			if hmac.Equal(c, want) {
				return nil
			}
		}
	}
	return ErrNoMatch
}

// checkTime rejects a signed timestamp more than the tolerance away from
// the arrival time, in the past (a replay) or in the future (a forged or
// badly skewed clock).
func (v *Verifier) checkTime(unix int64, at time.Time) error {
	d := at.Sub(time.Unix(unix, 0))
	switch {
	case d > v.tolerance:
		return fmt.Errorf("%w: %s old (tolerance %s)", ErrTimestamp, d.Truncate(time.Second), v.tolerance)
	case d < -v.tolerance:
		return fmt.Errorf("%w: %s in the future (tolerance %s)", ErrTimestamp, (-d).Truncate(time.Second), v.tolerance)
	}
	return nil
}

// isToken reports whether s is a non-empty RFC 9110 token, the syntax of a
// header field name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
