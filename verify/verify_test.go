package verify_test

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/verify"
)

// t0 is the signing time of the tests: a fixed instant, so that nothing
// depends on the clock of the machine running them.
var t0 = time.Unix(1_700_000_000, 0)

// scheme describes one scheme for the tests that apply to all of them.
type scheme struct {
	name        string
	secrets     [2]string // current and next, for rotation
	headers     []string  // every header the scheme requires
	timestamped bool
}

var schemes = []scheme{
	{verify.SchemeHMACSHA256, [2]string{"hmac-current", "hmac-next"}, []string{"X-Signature"}, false},
	{verify.SchemeGitHub, [2]string{"gh-current", "gh-next"}, []string{"X-Hub-Signature-256"}, false},
	{verify.SchemeStripe, [2]string{"whsec_stripe-current", "whsec_stripe-next"}, []string{"Stripe-Signature"}, true},
	{verify.SchemeStandardWebhooks, [2]string{whsec("sw-current-key"), whsec("sw-next-key")},
		[]string{"webhook-id", "webhook-timestamp", "webhook-signature"}, true},
	{verify.SchemeSlack, [2]string{"slack-current", "slack-next"},
		[]string{"X-Slack-Signature", "X-Slack-Request-Timestamp"}, true},
	// X-Shopify-Webhook-Id is the event id, not part of the signature: the
	// intake, not the verifier, decides whether it must be there.
	{verify.SchemeShopify, [2]string{"shpss-current", "shpss-next"}, []string{"X-Shopify-Hmac-Sha256"}, false},
}

func whsec(key string) string { return "whsec_" + base64.StdEncoding.EncodeToString([]byte(key)) }

func (s scheme) config(secrets ...string) verify.Config {
	return verify.Config{Scheme: s.name, Secrets: secrets}
}

// mustNew returns the verifier of cfg or fails the test.
func mustNew(tb testing.TB, cfg verify.Config) *verify.Verifier {
	tb.Helper()
	v, err := verify.New(cfg)
	if err != nil {
		tb.Fatalf("New(%s): %v", cfg.Scheme, err)
	}
	return v
}

// signedHeader returns the headers a sender of cfg sends for body at at.
func signedHeader(tb testing.TB, cfg verify.Config, body []byte, at time.Time) http.Header {
	tb.Helper()
	h := http.Header{}
	if err := verify.SignRequest(cfg, h, body, at); err != nil {
		tb.Fatalf("SignRequest(%s): %v", cfg.Scheme, err)
	}
	return h
}

// checkErr fails unless err is nil for a nil want, or wraps both want and
// ErrSignature. It also checks that no secret leaks into the message.
func checkErr(tb testing.TB, err, want error, secrets ...string) {
	tb.Helper()
	if want == nil {
		if err != nil {
			tb.Fatalf("err=%v, want nil", err)
		}
		return
	}
	if !errors.Is(err, want) || !errors.Is(err, verify.ErrSignature) {
		tb.Fatalf("err=%v, want %v", err, want)
	}
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) {
			tb.Fatalf("error %q contains a secret", err)
		}
	}
}

func TestVerifyEveryScheme(t *testing.T) {
	body := []byte(`{"order_id":"o-1","amount":1200}`)
	for _, s := range schemes {
		both := s.config(s.secrets[0], s.secrets[1])
		t.Run(s.name, func(t *testing.T) {
			v := mustNew(t, both)
			verifyAt := func(h http.Header, b []byte, at time.Time) error {
				err := v.Verify(h, b, at)
				if err != nil {
					checkErr(t, err, verify.ErrSignature, s.secrets[:]...)
				}
				return err
			}
			t.Run("valid", func(t *testing.T) {
				checkErr(t, verifyAt(signedHeader(t, s.config(s.secrets[0]), body, t0), body, t0), nil)
			})
			t.Run("rotation", func(t *testing.T) {
				h := signedHeader(t, s.config(s.secrets[1]), body, t0)
				checkErr(t, verifyAt(h, body, t0), nil)
				checkErr(t, mustNew(t, s.config(s.secrets[0])).Verify(h, body, t0), verify.ErrNoMatch, s.secrets[:]...)
			})
			t.Run("tampered body", func(t *testing.T) {
				h := signedHeader(t, s.config(s.secrets[0]), body, t0)
				tampered := []byte(strings.Replace(string(body), "1200", "1201", 1))
				checkErr(t, verifyAt(h, tampered, t0), verify.ErrNoMatch)
				checkErr(t, verifyAt(h, append(body, ' '), t0), verify.ErrNoMatch)
			})
			t.Run("wrong secret", func(t *testing.T) {
				wrong := "attacker"
				if s.name == verify.SchemeStandardWebhooks {
					wrong = whsec("attacker")
				}
				checkErr(t, verifyAt(signedHeader(t, s.config(wrong), body, t0), body, t0), verify.ErrNoMatch)
			})
			for _, name := range s.headers {
				t.Run("missing "+name, func(t *testing.T) {
					h := signedHeader(t, s.config(s.secrets[0]), body, t0)
					h.Del(name)
					checkErr(t, verifyAt(h, body, t0), verify.ErrMissing)
					h.Set(name, "")
					checkErr(t, verifyAt(h, body, t0), verify.ErrMissing)
				})
			}
			t.Run("arrival time", func(t *testing.T) {
				h := signedHeader(t, s.config(s.secrets[0]), body, t0)
				tol := verify.DefaultTolerance
				if !s.timestamped {
					// Nothing signed carries a time: any arrival passes.
					checkErr(t, verifyAt(h, body, t0.Add(365*24*time.Hour)), nil)
					checkErr(t, verifyAt(h, body, t0.Add(-365*24*time.Hour)), nil)
					return
				}
				checkErr(t, verifyAt(h, body, t0.Add(tol)), nil)
				checkErr(t, verifyAt(h, body, t0.Add(-tol)), nil)
				stale := verifyAt(h, body, t0.Add(tol+time.Second))
				checkErr(t, stale, verify.ErrTimestamp)
				if !strings.Contains(stale.Error(), "old") {
					t.Fatalf("stale err=%v, want it to say old", stale)
				}
				future := verifyAt(h, body, t0.Add(-tol-time.Second))
				checkErr(t, future, verify.ErrTimestamp)
				if !strings.Contains(future.Error(), "future") {
					t.Fatalf("future err=%v, want it to say future", future)
				}
				// A configured tolerance replaces the default.
				short := s.config(s.secrets[0])
				short.Tolerance = 10 * time.Second
				vs := mustNew(t, short)
				checkErr(t, vs.Verify(h, body, t0.Add(10*time.Second)), nil)
				checkErr(t, vs.Verify(h, body, t0.Add(11*time.Second)), verify.ErrTimestamp)
				checkErr(t, vs.Verify(h, body, t0.Add(-11*time.Second)), verify.ErrTimestamp)
			})
		})
	}
}

func TestVerifyZeroVerifier(t *testing.T) {
	var v verify.Verifier
	checkErr(t, v.Verify(http.Header{}, nil, t0), verify.ErrSignature)
}

func TestKnown(t *testing.T) {
	for _, tc := range []struct {
		scheme string
		want   bool
	}{
		{"hmac-sha256", true}, {"github", true}, {"stripe", true}, {"standard-webhooks", true}, {"slack", true},
		{"shopify", true}, {"Shopify", false},
		{"", false}, {"GitHub", false}, {"hmac-sha1", false}, {"standard_webhooks", false},
	} {
		if got, want := verify.Known(tc.scheme), tc.want; got != want {
			t.Errorf("Known(%q)=%v, want %v", tc.scheme, got, want)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	const secret = "s3cr3t-value"
	for _, tc := range []struct {
		name string
		cfg  verify.Config
		want string
	}{
		{"unknown scheme", verify.Config{Scheme: "hmac-sha1", Secrets: []string{secret}}, "unknown scheme"},
		{"empty scheme", verify.Config{Secrets: []string{secret}}, "unknown scheme"},
		{"no secret", verify.Config{Scheme: "github"}, "at least one secret"},
		{"empty secret", verify.Config{Scheme: "slack", Secrets: []string{secret, ""}}, "secret 2: empty"},
		{"whsec not base64", verify.Config{Scheme: "standard-webhooks", Secrets: []string{"whsec_" + secret + "!"}}, "base64"},
		{"bare not base64", verify.Config{Scheme: "standard-webhooks", Secrets: []string{secret + "!"}}, "base64"},
		{"whsec empty key", verify.Config{Scheme: "standard-webhooks", Secrets: []string{"whsec_"}}, "empty key"},
		{"negative tolerance", verify.Config{Scheme: "stripe", Secrets: []string{secret}, Tolerance: -time.Second}, "negative tolerance"},
		{"header on github", verify.Config{Scheme: "github", Header: "X-Sig", Secrets: []string{secret}}, "only configurable"},
		{"bad header name", verify.Config{Scheme: "hmac-sha256", Header: "X Sig", Secrets: []string{secret}}, "not a valid header name"},
		{"header with colon", verify.Config{Scheme: "hmac-sha256", Header: "X-Sig:", Secrets: []string{secret}}, "not a valid header name"},
		{"header on shopify", verify.Config{Scheme: "shopify", Header: "X-Shopify-Hmac-Sha256", Secrets: []string{secret}}, "header is only configurable"},
		{"unknown encoding", verify.Config{Scheme: "hmac-sha256", Encoding: "base64url", Secrets: []string{secret}}, `unknown encoding "base64url"`},
		{"encoding case", verify.Config{Scheme: "hmac-sha256", Encoding: "Base64", Secrets: []string{secret}}, `unknown encoding "Base64"`},
		{"encoding on shopify", verify.Config{Scheme: "shopify", Encoding: "base64", Secrets: []string{secret}}, "encoding is only configurable"},
		{"encoding on github", verify.Config{Scheme: "github", Encoding: "hex", Secrets: []string{secret}}, "encoding is only configurable"},
		{"prefix on stripe", verify.Config{Scheme: "stripe", Prefix: ptr("v1="), Secrets: []string{secret}}, "prefix is only configurable"},
		{"empty prefix on shopify", verify.Config{Scheme: "shopify", Prefix: ptr(""), Secrets: []string{secret}}, "prefix is only configurable"},
		{"prefix with space", verify.Config{Scheme: "hmac-sha256", Prefix: ptr("sha256 "), Secrets: []string{secret}}, "visible ASCII"},
		{"prefix with newline", verify.Config{Scheme: "hmac-sha256", Prefix: ptr("a\nb="), Secrets: []string{secret}}, "visible ASCII"},
		{"prefix too long", verify.Config{Scheme: "hmac-sha256", Prefix: ptr(strings.Repeat("p", 33)), Secrets: []string{secret}}, "longer than 32"},
		{"no secret for shopify", verify.Config{Scheme: "shopify"}, "at least one secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := verify.New(tc.cfg)
			if err == nil || v != nil {
				t.Fatalf("New=%v, %v; want an error", v, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err=%v, want it to mention %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("err=%v contains the secret", err)
			}
		})
	}
}

func TestHMACSHA256Header(t *testing.T) {
	body := []byte("payload")
	cfg := verify.Config{Scheme: verify.SchemeHMACSHA256, Header: "x-acme-signature", Secrets: []string{"k"}}
	h := signedHeader(t, cfg, body, t0)
	if got, want := h.Get("X-Acme-Signature"), verify.Sign([]byte("k"), body); got != want {
		t.Fatalf("X-Acme-Signature=%q, want %q", got, want)
	}
	checkErr(t, mustNew(t, cfg).Verify(h, body, t0), nil)

	// The default header is not read when another is configured.
	moved := http.Header{}
	moved.Set("X-Signature", h.Get("X-Acme-Signature"))
	checkErr(t, mustNew(t, cfg).Verify(moved, body, t0), verify.ErrMissing)

	def := verify.Config{Scheme: verify.SchemeHMACSHA256, Secrets: []string{"k"}}
	checkErr(t, mustNew(t, def).Verify(moved, body, t0), nil)
}

func ptr(s string) *string { return &s }

func TestSignRequestFreshShopifyWebhookID(t *testing.T) {
	cfg := verify.Config{Scheme: verify.SchemeShopify, Secrets: []string{"k"}}
	body := []byte("{}")
	a, b := signedHeader(t, cfg, body, t0), signedHeader(t, cfg, body, t0)
	if a.Get("X-Shopify-Webhook-Id") == "" || a.Get("X-Shopify-Webhook-Id") == b.Get("X-Shopify-Webhook-Id") {
		t.Fatalf("X-Shopify-Webhook-Id %q and %q, want two fresh ids", a.Get("X-Shopify-Webhook-Id"), b.Get("X-Shopify-Webhook-Id"))
	}
	// The id is not signed: another one verifies just as well.
	a.Set("X-Shopify-Webhook-Id", "another")
	checkErr(t, mustNew(t, cfg).Verify(a, body, t0), nil)
}

func TestSignRequestFreshWebhookID(t *testing.T) {
	cfg := verify.Config{Scheme: verify.SchemeStandardWebhooks, Secrets: []string{whsec("k")}}
	body := []byte("{}")
	a, b := signedHeader(t, cfg, body, t0), signedHeader(t, cfg, body, t0)
	if a.Get("webhook-id") == "" || a.Get("webhook-id") == b.Get("webhook-id") {
		t.Fatalf("webhook-id %q and %q, want two fresh ids", a.Get("webhook-id"), b.Get("webhook-id"))
	}
	v := mustNew(t, cfg)
	checkErr(t, v.Verify(a, body, t0), nil)
	checkErr(t, v.Verify(b, body, t0), nil)
}

func TestSignRequestRefusesBadConfig(t *testing.T) {
	h := http.Header{}
	err := verify.SignRequest(verify.Config{Scheme: "nope", Secrets: []string{"k"}}, h, nil, t0)
	if err == nil || !strings.Contains(err.Error(), "unknown scheme") {
		t.Fatalf("err=%v, want unknown scheme", err)
	}
	if len(h) != 0 {
		t.Fatalf("header=%v, want nothing set", h)
	}
}
