package verify

import (
	"crypto/rand"
	"net/http"
	"strconv"
	"time"
)

// SignRequest sets on header what a sender of cfg.Scheme would send for
// body at time at, signed with the first of cfg.Secrets. It is for tests and
// benchmarks of receivers (intake, load tests): the daemon itself only signs
// outbound webhooks, with Sign. For standard-webhooks it sets webhook-id,
// and for shopify X-Shopify-Webhook-Id, only when the header has none, so
// a test can choose the delivery id.
func SignRequest(cfg Config, header http.Header, body []byte, at time.Time) error {
	v, err := New(cfg)
	if err != nil {
		return err
	}
	key := v.keys[0]
	ts := strconv.FormatInt(at.Unix(), 10)
	switch v.scheme {
	case SchemeHMACSHA256:
		header.Set(v.header, formatSig(v.encoding, v.prefix, mac(key, body)))
	case SchemeGitHub:
		header.Set(GitHubHeader, Sign(key, body))
	case SchemeShopify:
		if header.Get(ShopifyWebhookIDHeader) == "" {
			// Shopify sends a delivery id with every webhook; it is the
			// scheme's default event id.
			header.Set(ShopifyWebhookIDHeader, rand.Text())
		}
		header.Set(ShopifyHeader, formatBase64("", mac(key, body)))
	case SchemeStripe:
		sig := mac(key, []byte(ts), dot, body)
		header.Set(StripeHeader, formatStripe(stripeSig{ts: ts, v1: [][]byte{sig}}))
	case SchemeStandardWebhooks:
		id := header.Get(StandardIDHeader)
		if id == "" {
			// A fresh id per call, like a real sender's message id, so
			// that two signed requests are two deliveries to dedupe.
			id = "msg_" + rand.Text()
			header.Set(StandardIDHeader, id)
		}
		sig := mac(key, []byte(id), dot, []byte(ts), dot, body)
		header.Set(StandardTimestampHeader, ts)
		header.Set(StandardSignatureHeader, formatStandard([][]byte{sig}))
	case SchemeSlack:
		sig := mac(key, slackStart, []byte(ts), colon, body)
		header.Set(SlackTimestampHeader, ts)
		header.Set(SlackSignatureHeader, formatHex(slackPrefix, sig))
	}
	return nil
}
