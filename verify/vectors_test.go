package verify_test

import (
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/touba/touba-trigger/verify"
)

// Published test vectors, one per scheme; VECTORS.md lists their sources.
// Each test checks both directions: Verify accepts the published signature
// and SignRequest reproduces it byte for byte.

// GitHub, "Validating webhook deliveries", section "Testing the webhook
// payload validation":
// https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
const (
	githubSecret    = "It's a Secret to Everybody"
	githubPayload   = "Hello, World!"
	githubSignature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

func TestVectorGitHub(t *testing.T) {
	cfg := verify.Config{Scheme: verify.SchemeGitHub, Secrets: []string{githubSecret}}
	h := http.Header{}
	h.Set("X-Hub-Signature-256", githubSignature)
	if err := mustNew(t, cfg).Verify(h, []byte(githubPayload), time.Now()); err != nil {
		t.Fatalf("Verify(published vector): %v", err)
	}
	if got, want := signedHeader(t, cfg, []byte(githubPayload), time.Now()).Get("X-Hub-Signature-256"), githubSignature; got != want {
		t.Fatalf("SignRequest=%q, want %q", got, want)
	}
}

// The generic hmac-sha256 scheme and outbound signing compute the same MAC
// as GitHub, so GitHub's vector checks them too.
func TestVectorHMACSHA256(t *testing.T) {
	cfg := verify.Config{Scheme: verify.SchemeHMACSHA256, Secrets: []string{githubSecret}}
	h := http.Header{}
	h.Set("X-Signature", githubSignature)
	if err := mustNew(t, cfg).Verify(h, []byte(githubPayload), time.Now()); err != nil {
		t.Fatalf("Verify(published vector): %v", err)
	}
	if got, want := verify.Sign([]byte(githubSecret), []byte(githubPayload)), githubSignature; got != want {
		t.Fatalf("Sign=%q, want %q", got, want)
	}
}

// Standard Webhooks reference library, libraries/go/webhook_test.go
// TestWebhookSign (the same vector appears in the other reference
// libraries): https://github.com/standard-webhooks/standard-webhooks
const (
	swSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	swID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	swTimestamp = 1614265330
	swPayload   = `{"test": 2432232314}`
	swSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestVectorStandardWebhooks(t *testing.T) {
	at := time.Unix(swTimestamp, 0)
	// The reference libraries accept the key with and without its prefix.
	for _, secret := range []string{swSecret, swSecret[len("whsec_"):]} {
		cfg := verify.Config{Scheme: verify.SchemeStandardWebhooks, Secrets: []string{secret}}
		h := http.Header{}
		h.Set("webhook-id", swID)
		h.Set("webhook-timestamp", "1614265330")
		h.Set("webhook-signature", swSignature)
		if err := mustNew(t, cfg).Verify(h, []byte(swPayload), at); err != nil {
			t.Fatalf("Verify(published vector, secret form %d): %v", len(secret), err)
		}

		h = http.Header{}
		h.Set("webhook-id", swID) // SignRequest keeps an id that is present
		if err := verify.SignRequest(cfg, h, []byte(swPayload), at); err != nil {
			t.Fatal(err)
		}
		if got, want := h.Get("webhook-signature"), swSignature; got != want {
			t.Fatalf("SignRequest signature=%q, want %q", got, want)
		}
		if got, want := h.Get("webhook-id"), swID; got != want {
			t.Fatalf("SignRequest id=%q, want %q", got, want)
		}
		if got, want := h.Get("webhook-timestamp"), "1614265330"; got != want {
			t.Fatalf("SignRequest timestamp=%q, want %q", got, want)
		}
	}
}

// Slack, "Verifying requests from Slack", the worked example:
// https://api.slack.com/authentication/verifying-requests-from-slack
const (
	slackSecret    = "8f742231b10e8888abcd99yyyzzz85a5"
	slackTimestamp = 1531420618
	slackBody      = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	slackSignature = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
)

func TestVectorSlack(t *testing.T) {
	cfg := verify.Config{Scheme: verify.SchemeSlack, Secrets: []string{slackSecret}}
	at := time.Unix(slackTimestamp, 0)
	h := http.Header{}
	h.Set("X-Slack-Request-Timestamp", "1531420618")
	h.Set("X-Slack-Signature", slackSignature)
	if err := mustNew(t, cfg).Verify(h, []byte(slackBody), at); err != nil {
		t.Fatalf("Verify(published vector): %v", err)
	}
	if got, want := signedHeader(t, cfg, []byte(slackBody), at).Get("X-Slack-Signature"), slackSignature; got != want {
		t.Fatalf("SignRequest=%q, want %q", got, want)
	}
}

// Stripe publishes an example Stripe-Signature header ("Verify signatures
// manually", https://docs.stripe.com/webhooks#verify-manually) but not the
// secret and payload behind it, so it checks only the parser: t, the one v1,
// and the v0 element ignored.
func TestVectorStripeHeader(t *testing.T) {
	const header = "t=1492774577,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd,v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39"
	ts, unix, v1, err := verify.ParseStripe(header)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ts, "1492774577"; got != want {
		t.Fatalf("t=%q, want %q", got, want)
	}
	if got, want := unix, int64(1492774577); got != want {
		t.Fatalf("unix=%d, want %d", got, want)
	}
	if got, want := len(v1), 1; got != want {
		t.Fatalf("len(v1)=%d, want %d", got, want)
	}
	if got, want := hex.EncodeToString(v1[0]), "5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd"; got != want {
		t.Fatalf("v1=%s, want %s", got, want)
	}
}

// The MAC vector of the stripe-signature reference library (typeclasses/
// stripe, stripe-signature/test/test.hs): secret "secret", t=123, payload
// "hello". Independently checked with
// printf '123.hello' | openssl dgst -sha256 -hmac secret.
func TestVectorStripeMAC(t *testing.T) {
	const sig = "f89c0a0e96fa6304a7ebd5ecaf13bc1beb859577cd7cafb7bdbc43c3bc2f6afa"
	cfg := verify.Config{Scheme: verify.SchemeStripe, Secrets: []string{"secret"}}
	at := time.Unix(123, 0)
	h := http.Header{}
	h.Set("Stripe-Signature", "t=123,v1="+sig)
	if err := mustNew(t, cfg).Verify(h, []byte("hello"), at); err != nil {
		t.Fatalf("Verify(reference vector): %v", err)
	}
	if got, want := signedHeader(t, cfg, []byte("hello"), at).Get("Stripe-Signature"), "t=123,v1="+sig; got != want {
		t.Fatalf("SignRequest=%q, want %q", got, want)
	}
}

// Shopify publishes no body, secret and digest together (shopify.dev,
// "Verify webhook deliveries", describes the computation only). The vector
// here is the one of Shopify's own library, Shopify/shopify-api-js,
// packages/shopify-api/lib/webhooks/__tests__/validate.test.ts ("returns
// true for valid request"), whose secret is apiSecretKey of
// lib/__tests__/test-config.ts. Checked independently with
// printf '{"foo": "bar"}' | openssl dgst -sha256 -hmac test_secret_key -binary | base64
const (
	shopifyLibSecret    = "test_secret_key"
	shopifyLibBody      = `{"foo": "bar"}`
	shopifyLibSignature = "B23tXN681gZ0qIWNRrgtzBE9XSDo5yaUu6wfmhu3a7g="
	shopifyLibWebhookID = "123456789"
)

func TestVectorShopify(t *testing.T) {
	cfg := verify.Config{Scheme: verify.SchemeShopify, Secrets: []string{shopifyLibSecret}}
	h := http.Header{}
	h.Set("X-Shopify-Hmac-Sha256", shopifyLibSignature)
	if err := mustNew(t, cfg).Verify(h, []byte(shopifyLibBody), time.Now()); err != nil {
		t.Fatalf("Verify(library vector): %v", err)
	}
	h = http.Header{}
	h.Set("X-Shopify-Webhook-Id", shopifyLibWebhookID) // kept, as webhook-id is
	if err := verify.SignRequest(cfg, h, []byte(shopifyLibBody), time.Now()); err != nil {
		t.Fatal(err)
	}
	if got, want := h.Get("X-Shopify-Hmac-Sha256"), shopifyLibSignature; got != want {
		t.Fatalf("SignRequest=%q, want %q", got, want)
	}
	if got, want := h.Get("X-Shopify-Webhook-Id"), shopifyLibWebhookID; got != want {
		t.Fatalf("SignRequest id=%q, want %q", got, want)
	}
	// The generic scheme with encoding base64 and no prefix reads the
	// same header the same way.
	none := ""
	generic := verify.Config{Scheme: verify.SchemeHMACSHA256, Header: "X-Shopify-Hmac-Sha256",
		Encoding: verify.EncodingBase64, Prefix: &none, Secrets: []string{shopifyLibSecret}}
	if err := mustNew(t, generic).Verify(h, []byte(shopifyLibBody), time.Now()); err != nil {
		t.Fatalf("hmac-sha256 base64 Verify(library vector): %v", err)
	}
}

// Independent vectors, each computed with both
//
//	printf '%s' "$BODY" | openssl dgst -sha256 -hmac "$SECRET" -binary | base64   # base64
//	printf '%s' "$BODY" | openssl dgst -sha256 -hmac "$SECRET"                    # hex
//
// and Python 3.11's hmac.new(SECRET, BODY, hashlib.sha256) (VECTORS.md
// gives the commands), for a body whose signature has both '+' and '/' so
// that the URL-safe spelling differs.
const (
	indSecret    = "touba-shopify-test-secret"
	indBody      = `{"id":820982911946154508,"email":"jon@example.com","topic":"orders/paid"}`
	indBase64    = "dhcHX6ln59OttwiCHN+4S8/pjV/HruvhPW7sII1Neg4="
	indURLSafe   = "dhcHX6ln59OttwiCHN-4S8_pjV_HruvhPW7sII1Neg4" // base64url, unpadded
	indHex       = "7617075fa967e7d3adb708821cdfb84bcfe98d5fc7aeebe13d6eec208d4d7a0e"
	indHexUpper  = "7617075FA967E7D3ADB708821CDFB84BCFE98D5FC7AEEBE13D6EEC208D4D7A0E"
	indWrongB64  = "h9YRFFnWACQU1dLyoAWXHdgpx+LhLJHXyMgUjNvbE5c=" // the same body under "wrong-secret"
	indTampered  = `{"id":820982911946154509,"email":"jon@example.com","topic":"orders/paid"}`
	indNonCanon  = "dhcHX6ln59OttwiCHN+4S8/pjV/HruvhPW7sII1Neg5=" // same bytes, a trailing bit set
	indUnpadded  = "dhcHX6ln59OttwiCHN+4S8/pjV/HruvhPW7sII1Neg4"
	shopifyHName = "X-Shopify-Hmac-Sha256"
)

func TestIndependentVectors(t *testing.T) {
	none, v1, sha := "", "v1=", "sha256="
	shopify := verify.Config{Scheme: verify.SchemeShopify, Secrets: []string{indSecret}}
	b64 := func(prefix *string) verify.Config {
		return verify.Config{Scheme: verify.SchemeHMACSHA256, Header: "X-Sig", Encoding: verify.EncodingBase64, Prefix: prefix, Secrets: []string{indSecret}}
	}
	hexc := func(prefix *string) verify.Config {
		return verify.Config{Scheme: verify.SchemeHMACSHA256, Header: "X-Sig", Encoding: verify.EncodingHex, Prefix: prefix, Secrets: []string{indSecret}}
	}
	for _, tc := range []struct {
		name         string
		cfg          verify.Config
		header, sent string // sent "" leaves the header out
		body         string
		want         error
	}{
		{"shopify valid", shopify, shopifyHName, indBase64, indBody, nil},
		{"shopify surrounding spaces", shopify, shopifyHName, " " + indBase64 + " ", indBody, nil},
		{"shopify tampered body", shopify, shopifyHName, indBase64, indTampered, verify.ErrNoMatch},
		{"shopify wrong secret", shopify, shopifyHName, indWrongB64, indBody, verify.ErrNoMatch},
		{"shopify missing header", shopify, shopifyHName, "", indBody, verify.ErrMissing},
		{"shopify in another header", shopify, "X-Shopify-Hmac-Sha1", indBase64, indBody, verify.ErrMissing},
		{"shopify url-safe", shopify, shopifyHName, indURLSafe, indBody, verify.ErrMalformed},
		{"shopify unpadded", shopify, shopifyHName, indUnpadded, indBody, verify.ErrMalformed},
		{"shopify non-canonical", shopify, shopifyHName, indNonCanon, indBody, verify.ErrMalformed},
		{"shopify hex", shopify, shopifyHName, indHex, indBody, verify.ErrMalformed},
		{"shopify sha256= prefix", shopify, shopifyHName, "sha256=" + indBase64, indBody, verify.ErrMalformed},
		{"shopify truncated", shopify, shopifyHName, indBase64[:40], indBody, verify.ErrMalformed},
		{"shopify line break", shopify, shopifyHName, indBase64[:20] + "\n" + indBase64[20:], indBody, verify.ErrMalformed},

		{"base64 no prefix", b64(&none), "X-Sig", indBase64, indBody, nil},
		{"base64 v1=", b64(&v1), "X-Sig", "v1=" + indBase64, indBody, nil},
		{"base64 default prefix", b64(nil), "X-Sig", "sha256=" + indBase64, indBody, nil},
		{"base64 v1= missing", b64(&v1), "X-Sig", indBase64, indBody, verify.ErrMalformed},
		{"base64 V1= case", b64(&v1), "X-Sig", "V1=" + indBase64, indBody, verify.ErrMalformed},
		{"base64 prefix where none", b64(&none), "X-Sig", "v1=" + indBase64, indBody, verify.ErrMalformed},
		{"base64 tampered", b64(&v1), "X-Sig", "v1=" + indBase64, indTampered, verify.ErrNoMatch},
		{"base64 url-safe", b64(&none), "X-Sig", indURLSafe, indBody, verify.ErrMalformed},
		{"base64 given hex", b64(&none), "X-Sig", indHex, indBody, verify.ErrMalformed},

		{"hex lower no prefix", hexc(&none), "X-Sig", indHex, indBody, nil},
		{"hex upper no prefix", hexc(&none), "X-Sig", indHexUpper, indBody, nil},
		{"hex lower v1=", hexc(&v1), "X-Sig", "v1=" + indHex, indBody, nil},
		{"hex upper v1=", hexc(&v1), "X-Sig", "v1=" + indHexUpper, indBody, nil},
		{"hex sha256= explicit", hexc(&sha), "X-Sig", "sha256=" + indHexUpper, indBody, nil},
		{"hex default prefix missing", hexc(nil), "X-Sig", indHex, indBody, verify.ErrMalformed},
		{"hex v1= given sha256=", hexc(&v1), "X-Sig", "sha256=" + indHex, indBody, verify.ErrMalformed},
		{"hex given base64", hexc(&none), "X-Sig", indBase64, indBody, verify.ErrMalformed},
		{"hex tampered", hexc(&none), "X-Sig", indHex, indTampered, verify.ErrNoMatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.sent != "" {
				h[http.CanonicalHeaderKey(tc.header)] = []string{tc.sent}
			}
			checkErr(t, mustNew(t, tc.cfg).Verify(h, []byte(tc.body), time.Now()), tc.want, indSecret)
		})
	}
	// SignRequest writes the lowercase hex and canonical base64 above.
	for _, tc := range []struct {
		cfg  verify.Config
		want string
	}{
		{shopify, indBase64}, {b64(&none), indBase64}, {b64(&v1), "v1=" + indBase64},
		{hexc(&none), indHex}, {hexc(&v1), "v1=" + indHex}, {hexc(nil), "sha256=" + indHex},
	} {
		name := "X-Sig"
		if tc.cfg.Scheme == verify.SchemeShopify {
			name = shopifyHName
		}
		if got := signedHeader(t, tc.cfg, []byte(indBody), time.Now()).Get(name); got != tc.want {
			t.Errorf("SignRequest(%s %s)=%q, want %q", tc.cfg.Scheme, tc.cfg.Encoding, got, tc.want)
		}
	}
}
