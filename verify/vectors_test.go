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
