package verify

import (
	"fmt"
	"net/http"
	"time"
)

// Separators of the signed payloads, kept as byte slices so that each
// verification hands mac its parts without building one big buffer.
var (
	dot        = []byte(".")
	colon      = []byte(":")
	slackStart = []byte("v0:")
)

// verifyBody checks the schemes that sign the body alone: hmac-sha256,
// github ("sha256=<hex>" in X-Hub-Signature-256) and shopify (bare base64
// in X-Shopify-Hmac-Sha256). Header name carries prefix followed by the
// HMAC-SHA256(secret, body) in encoding. None of them signs a timestamp,
// so none can reject a replay; dedupe by event id does that.
func (v *Verifier) verifyBody(header http.Header, name, encoding, prefix string, body []byte) error {
	value := header.Get(name)
	if value == "" {
		return fmt.Errorf("%w %s", ErrMissing, name)
	}
	sig, err := parseSig(encoding, prefix, value)
	if err != nil {
		return fmt.Errorf("%w %s: %v", ErrMalformed, name, err)
	}
	return v.match([][]byte{sig}, body)
}

// verifyStripe checks Stripe-Signature: "t=<unix>,v1=<hex>..." over
// "<t>.<body>". Any v1 matching any secret passes.
func (v *Verifier) verifyStripe(header http.Header, body []byte, at time.Time) error {
	value := header.Get(StripeHeader)
	if value == "" {
		return fmt.Errorf("%w %s", ErrMissing, StripeHeader)
	}
	sig, err := parseStripe(value)
	if err != nil {
		return fmt.Errorf("%w %s: %v", ErrMalformed, StripeHeader, err)
	}
	if err := v.checkTime(sig.unix, at); err != nil {
		return err
	}
	return v.match(sig.v1, []byte(sig.ts), dot, body)
}

// verifyStandard checks Standard Webhooks: webhook-signature holds
// "v1,<base64>" entries over "<webhook-id>.<webhook-timestamp>.<body>",
// keyed with the base64-decoded secret.
func (v *Verifier) verifyStandard(header http.Header, body []byte, at time.Time) error {
	id := header.Get(StandardIDHeader)
	ts := header.Get(StandardTimestampHeader)
	value := header.Get(StandardSignatureHeader)
	for _, h := range [...]struct{ name, value string }{
		{StandardIDHeader, id}, {StandardTimestampHeader, ts}, {StandardSignatureHeader, value},
	} {
		if h.value == "" {
			return fmt.Errorf("%w %s", ErrMissing, h.name)
		}
	}
	unix, err := parseUnix(ts)
	if err != nil {
		return fmt.Errorf("%w %s: %v", ErrMalformed, StandardTimestampHeader, err)
	}
	sigs, err := parseStandard(value)
	if err != nil {
		return fmt.Errorf("%w %s: %v", ErrMalformed, StandardSignatureHeader, err)
	}
	if err := v.checkTime(unix, at); err != nil {
		return err
	}
	return v.match(sigs, []byte(id), dot, []byte(ts), dot, body)
}

// verifySlack checks X-Slack-Signature: "v0=<hex>" over
// "v0:<X-Slack-Request-Timestamp>:<body>".
func (v *Verifier) verifySlack(header http.Header, body []byte, at time.Time) error {
	ts := header.Get(SlackTimestampHeader)
	value := header.Get(SlackSignatureHeader)
	if ts == "" {
		return fmt.Errorf("%w %s", ErrMissing, SlackTimestampHeader)
	}
	if value == "" {
		return fmt.Errorf("%w %s", ErrMissing, SlackSignatureHeader)
	}
	unix, err := parseUnix(ts)
	if err != nil {
		return fmt.Errorf("%w %s: %v", ErrMalformed, SlackTimestampHeader, err)
	}
	sig, err := parseHex(slackPrefix, value)
	if err != nil {
		return fmt.Errorf("%w %s: %v", ErrMalformed, SlackSignatureHeader, err)
	}
	if err := v.checkTime(unix, at); err != nil {
		return err
	}
	return v.match([][]byte{sig}, slackStart, []byte(ts), colon, body)
}
