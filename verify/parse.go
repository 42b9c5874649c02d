package verify

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
)

// Header names of the inbound schemes, in canonical form.
const (
	GitHubHeader            = "X-Hub-Signature-256"
	StripeHeader            = "Stripe-Signature"
	StandardIDHeader        = "Webhook-Id"
	StandardTimestampHeader = "Webhook-Timestamp"
	StandardSignatureHeader = "Webhook-Signature"
	SlackSignatureHeader    = "X-Slack-Signature"
	SlackTimestampHeader    = "X-Slack-Request-Timestamp"
	ShopifyHeader           = "X-Shopify-Hmac-Sha256"
	// ShopifyWebhookIDHeader is Shopify's delivery id: not signed, and the
	// default event id of the shopify scheme (SPEC §2.1).
	ShopifyWebhookIDHeader = "X-Shopify-Webhook-Id"
)

// Prefixes of the hex signature forms.
const (
	sha256Prefix = "sha256=" // X-Signature, X-Hub-Signature-256
	slackPrefix  = "v0="     // X-Slack-Signature
)

// parseHex parses "<prefix><hex HMAC-SHA256>", the form of X-Signature,
// X-Hub-Signature-256 ("sha256=") and X-Slack-Signature ("v0="). Hex digits
// of either case are accepted: hex has no other spelling to confuse, and
// some senders print uppercase. The prefix is matched exactly, case
// included, after surrounding spaces are trimmed.
func parseHex(prefix, s string) ([]byte, error) {
	h, ok := strings.CutPrefix(strings.TrimSpace(s), prefix)
	if !ok {
		return nil, errors.New("no " + prefix + " prefix")
	}
	if len(h) != 2*sha256.Size {
		return nil, errors.New("not 64 hex digits")
	}
	sig, err := hex.DecodeString(h)
	if err != nil {
		return nil, errors.New("not 64 hex digits")
	}
	return sig, nil
}

// formatHex is the inverse of parseHex, with lowercase hex.
func formatHex(prefix string, sig []byte) string {
	return prefix + hex.EncodeToString(sig)
}

// parseBase64 parses "<prefix><base64 HMAC-SHA256>", the form of
// X-Shopify-Hmac-Sha256 (no prefix). Only the standard alphabet with its
// padding is accepted, in its one canonical spelling (44 characters, zero
// trailing bits, no line breaks, which Go's decoder would otherwise skip):
// Shopify and the other base64 senders we know of send exactly that, and
// a second accepted spelling of one signature buys nothing.
func parseBase64(prefix, s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(strings.TrimSpace(s), prefix)
	if !ok {
		return nil, errors.New("no " + prefix + " prefix")
	}
	sig, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(sig) != sha256.Size || base64.StdEncoding.EncodeToString(sig) != b64 {
		return nil, errors.New("not 32 bytes in padded standard base64")
	}
	return sig, nil
}

// formatBase64 is the inverse of parseBase64.
func formatBase64(prefix string, sig []byte) string {
	return prefix + base64.StdEncoding.EncodeToString(sig)
}

// parseSig parses a body signature in either encoding.
func parseSig(encoding, prefix, s string) ([]byte, error) {
	if encoding == EncodingBase64 {
		return parseBase64(prefix, s)
	}
	return parseHex(prefix, s)
}

// formatSig is the inverse of parseSig.
func formatSig(encoding, prefix string, sig []byte) string {
	if encoding == EncodingBase64 {
		return formatBase64(prefix, sig)
	}
	return formatHex(prefix, sig)
}

// stripeSig is a parsed Stripe-Signature header.
type stripeSig struct {
	ts   string   // the t= value exactly as sent: it is part of the signed payload
	unix int64    // ts as a number
	v1   [][]byte // every readable v1 signature
}

// parseStripe parses "t=<unix>,v1=<hex>[,v1=<hex>...]". Elements of other
// schemes (v0, test keys) are ignored, and so is a v1 value that is not a
// SHA-256 in hex, as Stripe's libraries do: during a secret roll Stripe
// sends one v1 per secret and only one of them has to be readable.
func parseStripe(s string) (stripeSig, error) {
	var sig stripeSig
	seenT := false
	for _, item := range strings.Split(s, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return stripeSig{}, errors.New("element without '='")
		}
		switch key {
		case "t":
			if seenT {
				return stripeSig{}, errors.New("more than one t= element")
			}
			unix, err := parseUnix(val)
			if err != nil {
				return stripeSig{}, err
			}
			seenT, sig.ts, sig.unix = true, val, unix
		case "v1":
			if b, err := hex.DecodeString(val); err == nil && len(b) == sha256.Size {
				sig.v1 = append(sig.v1, b)
			}
		}
	}
	if !seenT {
		return stripeSig{}, errors.New("no t= timestamp")
	}
	if len(sig.v1) == 0 {
		return stripeSig{}, errors.New("no v1 signature")
	}
	return sig, nil
}

// formatStripe is the inverse of parseStripe.
func formatStripe(sig stripeSig) string {
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(sig.ts)
	for _, v := range sig.v1 {
		b.WriteString(",v1=")
		b.WriteString(hex.EncodeToString(v))
	}
	return b.String()
}

// parseStandard parses a webhook-signature value: space-separated
// "<version>,<base64>" entries. Entries of other versions (v1a is the
// asymmetric one) and unreadable v1 entries are ignored, as the reference
// libraries do, so that a sender can add versions without breaking us.
func parseStandard(s string) ([][]byte, error) {
	var sigs [][]byte
	for _, entry := range strings.Fields(s) {
		version, b64, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		if b, err := base64.StdEncoding.DecodeString(b64); err == nil && len(b) == sha256.Size {
			sigs = append(sigs, b)
		}
	}
	if len(sigs) == 0 {
		return nil, errors.New("no v1 signature")
	}
	return sigs, nil
}

// formatStandard is the inverse of parseStandard.
func formatStandard(sigs [][]byte) string {
	parts := make([]string, len(sigs))
	for i, sig := range sigs {
		parts[i] = "v1," + base64.StdEncoding.EncodeToString(sig)
	}
	return strings.Join(parts, " ")
}

// parseUnix parses a timestamp in whole unix seconds: decimal digits only,
// no sign, no fraction, no spaces, at most 18 digits (so it cannot
// overflow). Callers sign the text as sent, so it is checked, not normalised.
func parseUnix(s string) (int64, error) {
	if s == "" || len(s) > 18 {
		return 0, errors.New("timestamp is not unix seconds")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("timestamp is not unix seconds")
		}
	}
	return strconv.ParseInt(s, 10, 64)
}
