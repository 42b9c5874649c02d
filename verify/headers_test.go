package verify_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/verify"
)

// headerCase edits the headers of a validly signed request and names the
// outcome: nil when the edited request must still pass.
type headerCase struct {
	name string
	edit func(h http.Header)
	want error
}

// runHeaderCases signs body under cfg at t0, applies each edit and checks
// the verdict of a verifier of cfg.
func runHeaderCases(t *testing.T, cfg verify.Config, cases []headerCase) {
	t.Helper()
	body := []byte(`{"id":"evt_1"}`)
	v := mustNew(t, cfg)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := signedHeader(t, cfg, body, t0)
			tc.edit(h)
			checkErr(t, v.Verify(h, body, t0), tc.want, cfg.Secrets...)
		})
	}
}

// set returns an edit that sets name to the value built from the current
// one.
func set(name string, f func(old string) string) func(http.Header) {
	return func(h http.Header) { h.Set(name, f(h.Get(name))) }
}

func fixed(s string) func(string) string { return func(string) string { return s } }

var (
	hex64     = strings.Repeat("ab", 32) // well-formed, matches nothing
	otherB64  = base64.StdEncoding.EncodeToString(make([]byte, 32))
	shortHex  = strings.Repeat("ab", 31)
	nonHex64  = strings.Repeat("zz", 32)
	tsPlusOne = func(old string) string { return old[:len(old)-1] + string(old[len(old)-1]+1) }
)

func TestHexHeaders(t *testing.T) {
	for _, tc := range []struct{ scheme, header string }{
		{verify.SchemeHMACSHA256, "X-Signature"},
		{verify.SchemeGitHub, "X-Hub-Signature-256"},
	} {
		t.Run(tc.scheme, func(t *testing.T) {
			runHeaderCases(t, verify.Config{Scheme: tc.scheme, Secrets: []string{"hex-secret-1", "hex-secret-2"}}, []headerCase{
				{"uppercase hex", set(tc.header, func(old string) string { return "sha256=" + strings.ToUpper(old[7:]) }), nil},
				{"surrounding spaces", set(tc.header, func(old string) string { return "  " + old + " " }), nil},
				{"sha1 prefix", set(tc.header, fixed("sha1="+hex64[:40])), verify.ErrMalformed},
				{"no prefix", set(tc.header, func(old string) string { return old[7:] }), verify.ErrMalformed},
				{"uppercase prefix", set(tc.header, func(old string) string { return "SHA256=" + old[7:] }), verify.ErrMalformed},
				{"short", set(tc.header, fixed("sha256="+shortHex)), verify.ErrMalformed},
				{"not hex", set(tc.header, fixed("sha256="+nonHex64)), verify.ErrMalformed},
				{"two in one header", set(tc.header, func(old string) string { return old + "," + old }), verify.ErrMalformed},
				{"other signature", set(tc.header, fixed("sha256="+hex64)), verify.ErrNoMatch},
			})
		})
	}
}

func TestStripeHeader(t *testing.T) {
	const name = "Stripe-Signature"
	// good pulls the valid "t=..,v1=.." apart.
	good := func(old string) (ts, sig string) {
		t, v, _ := strings.Cut(old, ",")
		return t[2:], v[3:]
	}
	with := func(f func(ts, sig string) string) func(http.Header) {
		return set(name, func(old string) string { return f(good(old)) })
	}
	runHeaderCases(t, verify.Config{Scheme: verify.SchemeStripe, Secrets: []string{"whsec_a", "whsec_b"}}, []headerCase{
		{"v1 after others", with(func(ts, sig string) string {
			return "t=" + ts + ",v1=" + hex64 + ",v0=" + hex64 + ",v1=" + sig
		}), nil},
		{"unreadable v1 ignored", with(func(ts, sig string) string { return "t=" + ts + ",v1=nothex,v1=" + sig }), nil},
		{"t last", with(func(ts, sig string) string { return "v1=" + sig + ",t=" + ts }), nil},
		{"unknown element ignored", with(func(ts, sig string) string { return "t=" + ts + ",v1=" + sig + ",foo=bar" }), nil},
		{"several wrong v1", with(func(ts, sig string) string { return "t=" + ts + ",v1=" + hex64 + ",v1=" + hex64 }), verify.ErrNoMatch},
		{"timestamp changed", with(func(ts, sig string) string { return "t=" + tsPlusOne(ts) + ",v1=" + sig }), verify.ErrNoMatch},
		{"only v0", with(func(ts, sig string) string { return "t=" + ts + ",v0=" + sig }), verify.ErrMalformed},
		{"no v1", with(func(ts, sig string) string { return "t=" + ts }), verify.ErrMalformed},
		{"no readable v1", with(func(ts, sig string) string { return "t=" + ts + ",v1=" + shortHex }), verify.ErrMalformed},
		{"no t", with(func(ts, sig string) string { return "v1=" + sig }), verify.ErrMalformed},
		{"two t", with(func(ts, sig string) string { return "t=" + ts + ",t=" + ts + ",v1=" + sig }), verify.ErrMalformed},
		{"t not a number", with(func(ts, sig string) string { return "t=1e9,v1=" + sig }), verify.ErrMalformed},
		{"negative t", with(func(ts, sig string) string { return "t=-" + ts + ",v1=" + sig }), verify.ErrMalformed},
		{"t in milliseconds too long", with(func(ts, sig string) string { return "t=" + strings.Repeat("9", 19) + ",v1=" + sig }), verify.ErrMalformed},
		{"element without =", with(func(ts, sig string) string { return "t=" + ts + ",v1," + sig }), verify.ErrMalformed},
		{"garbage", set(name, fixed("garbage")), verify.ErrMalformed},
	})
}

func TestStandardWebhooksHeaders(t *testing.T) {
	const sigName = "webhook-signature"
	runHeaderCases(t, verify.Config{Scheme: verify.SchemeStandardWebhooks, Secrets: []string{whsec("a"), whsec("b")}}, []headerCase{
		{"several, other versions ignored", set(sigName, func(old string) string {
			return "v1," + otherB64 + " v1a," + otherB64 + " v2," + old[3:] + " " + old
		}), nil},
		{"extra spaces", set(sigName, func(old string) string { return "v1,garbage  " + old + "   v1," + otherB64 }), nil},
		{"wrong version", set(sigName, func(old string) string { return "v2," + old[3:] }), verify.ErrMalformed},
		{"not base64", set(sigName, fixed("v1,@@@not-base64@@@")), verify.ErrMalformed},
		{"short", set(sigName, fixed("v1,"+base64.StdEncoding.EncodeToString(make([]byte, 16)))), verify.ErrMalformed},
		{"no comma", set(sigName, func(old string) string { return "v1" + old[3:] }), verify.ErrMalformed},
		{"several wrong", set(sigName, fixed("v1,"+otherB64+" v1,"+otherB64)), verify.ErrNoMatch},
		{"id changed", set("webhook-id", func(old string) string { return old + "x" }), verify.ErrNoMatch},
		{"timestamp changed", set("webhook-timestamp", tsPlusOne), verify.ErrNoMatch},
		{"timestamp with fraction", set("webhook-timestamp", func(old string) string { return old + ".5" }), verify.ErrMalformed},
		{"timestamp as date", set("webhook-timestamp", fixed("2023-11-14T22:13:20Z")), verify.ErrMalformed},
	})
}

func TestSlackHeaders(t *testing.T) {
	const sigName, tsName = "X-Slack-Signature", "X-Slack-Request-Timestamp"
	runHeaderCases(t, verify.Config{Scheme: verify.SchemeSlack, Secrets: []string{"slack-secret-1", "slack-secret-2"}}, []headerCase{
		{"uppercase hex", set(sigName, func(old string) string { return "v0=" + strings.ToUpper(old[3:]) }), nil},
		{"other version", set(sigName, func(old string) string { return "v1=" + old[3:] }), verify.ErrMalformed},
		{"sha256 prefix", set(sigName, func(old string) string { return "sha256=" + old[3:] }), verify.ErrMalformed},
		{"short", set(sigName, fixed("v0="+shortHex)), verify.ErrMalformed},
		{"not hex", set(sigName, fixed("v0="+nonHex64)), verify.ErrMalformed},
		{"other signature", set(sigName, fixed("v0="+hex64)), verify.ErrNoMatch},
		{"timestamp changed", set(tsName, tsPlusOne), verify.ErrNoMatch},
		{"timestamp not a number", set(tsName, fixed("now")), verify.ErrMalformed},
		{"timestamp with sign", set(tsName, func(old string) string { return "+" + old }), verify.ErrMalformed},
	})
}

func TestShopifyHeaders(t *testing.T) {
	const name = "X-Shopify-Hmac-Sha256"
	runHeaderCases(t, verify.Config{Scheme: verify.SchemeShopify, Secrets: []string{"shop-secret-1", "shop-secret-2"}}, []headerCase{
		{"surrounding spaces", set(name, func(old string) string { return " " + old + "  " }), nil},
		{"lowercase name", func(h http.Header) { v := h.Get(name); h.Del(name); h["x-shopify-hmac-sha256"] = []string{v} }, verify.ErrMissing},
		{"webhook id changed", set("X-Shopify-Webhook-Id", fixed("not-signed")), nil},
		{"unpadded", set(name, func(old string) string { return strings.TrimRight(old, "=") }), verify.ErrMalformed},
		{"hex of the same", set(name, fixed(hex64)), verify.ErrMalformed},
		{"sha256 prefix", set(name, func(old string) string { return "sha256=" + old }), verify.ErrMalformed},
		{"short", set(name, fixed(base64.StdEncoding.EncodeToString(make([]byte, 31)))), verify.ErrMalformed},
		{"long", set(name, fixed(base64.StdEncoding.EncodeToString(make([]byte, 33)))), verify.ErrMalformed},
		{"not base64", set(name, fixed("@@@not-base64@@@")), verify.ErrMalformed},
		// The URL-safe alphabet is covered by TestIndependentVectors, whose
		// signature has a '+' and a '/' to differ in.
		{"two in one header", set(name, func(old string) string { return old + "," + old }), verify.ErrMalformed},
		{"other signature", set(name, fixed(otherB64)), verify.ErrNoMatch},
	})
}

// TestHMACSHA256Formats runs the generic scheme in each encoding with the
// default, no and a custom prefix.
func TestHMACSHA256Formats(t *testing.T) {
	const name = "X-Sig"
	for _, tc := range []struct {
		encoding string
		prefix   *string
		want     string // the prefix in effect
	}{
		{"", nil, "sha256="},
		{verify.EncodingHex, ptr(""), ""},
		{verify.EncodingHex, ptr("v1="), "v1="},
		{verify.EncodingBase64, nil, "sha256="},
		{verify.EncodingBase64, ptr(""), ""},
		{verify.EncodingBase64, ptr("v1="), "v1="},
	} {
		label := tc.encoding + " prefix " + tc.want
		if tc.want == "" {
			label = tc.encoding + " no prefix"
		}
		t.Run(label, func(t *testing.T) {
			cfg := verify.Config{Scheme: verify.SchemeHMACSHA256, Header: name, Encoding: tc.encoding, Prefix: tc.prefix,
				Secrets: []string{"fmt-secret-1", "fmt-secret-2"}}
			strip := func(old string) string { return strings.TrimPrefix(old, tc.want) }
			cases := []headerCase{
				{"as signed", func(http.Header) {}, nil},
				{"surrounding spaces", set(name, func(old string) string { return " " + old + " " }), nil},
				{"other signature", set(name, fixed(tc.want+hex64)), verify.ErrNoMatch},
				{"other prefix", set(name, func(old string) string { return "v9=" + strip(old) }), verify.ErrMalformed},
				{"two in one header", set(name, func(old string) string { return old + "," + old }), verify.ErrMalformed},
			}
			if tc.want != "" {
				cases = append(cases,
					headerCase{"prefix doubled", set(name, func(old string) string { return tc.want + old }), verify.ErrMalformed},
					headerCase{"prefix missing", set(name, strip), verify.ErrMalformed},
					headerCase{"prefix upper case", set(name, func(old string) string { return strings.ToUpper(tc.want) + strip(old) }), verify.ErrMalformed})
			}
			if tc.encoding == verify.EncodingBase64 {
				cases[2] = headerCase{"other signature", set(name, fixed(tc.want+otherB64)), verify.ErrNoMatch}
				cases = append(cases,
					headerCase{"unpadded", set(name, func(old string) string { return strings.TrimRight(old, "=") }), verify.ErrMalformed},
					headerCase{"hex instead", set(name, fixed(tc.want+hex64)), verify.ErrMalformed})
			} else {
				cases = append(cases,
					headerCase{"uppercase hex", set(name, func(old string) string { return tc.want + strings.ToUpper(strip(old)) }), nil},
					headerCase{"base64 instead", set(name, fixed(tc.want+otherB64)), verify.ErrMalformed},
					headerCase{"short", set(name, fixed(tc.want+shortHex)), verify.ErrMalformed})
			}
			runHeaderCases(t, cfg, cases)
		})
	}
}
