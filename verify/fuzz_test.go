package verify_test

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/verify"
)

// sig32 turns fuzz bytes into a SHA-256-sized signature, or nil when there
// are too few.
func sig32(raw []byte) []byte {
	if len(raw) < 32 {
		return nil
	}
	return raw[:32]
}

func equalSigs(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// FuzzParseHex covers the "sha256=<hex>" and "v0=<hex>" forms: no panic, a
// parsed signature is 32 bytes and survives format-then-parse, and any 32
// bytes survive format-then-parse.
func FuzzParseHex(f *testing.F) {
	f.Add(githubSignature, []byte("0123456789abcdef0123456789abcdef"))
	f.Add(slackSignature, []byte{})
	f.Add("sha256="+shortHex, []byte{1, 2, 3})
	f.Add("v0=", []byte{})
	f.Add("sha256="+hex64+","+hex64, bytes.Repeat([]byte{0xff}, 40))
	f.Fuzz(func(t *testing.T, s string, raw []byte) {
		for _, prefix := range []string{"sha256=", "v0="} {
			if sig, err := verify.ParseHex(prefix, s); err == nil {
				if len(sig) != 32 {
					t.Fatalf("ParseHex(%q) gave %d bytes", s, len(sig))
				}
				again, err := verify.ParseHex(prefix, verify.FormatHex(prefix, sig))
				if err != nil || !bytes.Equal(again, sig) {
					t.Fatalf("round trip of %q: %x, %v", s, again, err)
				}
			}
			if sig := sig32(raw); sig != nil {
				got, err := verify.ParseHex(prefix, verify.FormatHex(prefix, sig))
				if err != nil || !bytes.Equal(got, sig) {
					t.Fatalf("FormatHex/ParseHex(%x)=%x, %v", sig, got, err)
				}
			}
		}
	})
}

// FuzzParseBase64 covers the base64 form (X-Shopify-Hmac-Sha256, and
// hmac-sha256 with encoding base64) under any valid prefix: no panic, a
// parsed signature is 32 bytes, the accepted text is the one canonical
// spelling of those bytes (so format gives back exactly the trimmed
// input), and any 32 bytes survive format-then-parse. The hex form is
// checked the same way under the fuzzed prefix.
func FuzzParseBase64(f *testing.F) {
	f.Add("", shopifyLibSignature, []byte{})
	f.Add("", indBase64, bytes.Repeat([]byte{0xfb}, 32))
	f.Add("", indURLSafe, []byte{})
	f.Add("", indNonCanon, []byte{})
	f.Add("v1=", "v1="+indBase64, []byte{})
	f.Add("sha256=", "sha256="+indBase64[:20]+"\n"+indBase64[20:], []byte{})
	f.Add("", " "+indHex+" ", []byte{1})
	f.Add("x", "x"+otherB64+"==", []byte{})
	f.Fuzz(func(t *testing.T, prefix, s string, raw []byte) {
		if verify.CheckPrefix(prefix) != nil {
			return
		}
		if sig, err := verify.ParseBase64(prefix, s); err == nil {
			if len(sig) != 32 {
				t.Fatalf("ParseBase64(%q, %q) gave %d bytes", prefix, s, len(sig))
			}
			if got, want := verify.FormatBase64(prefix, sig), strings.TrimSpace(s); got != want {
				t.Fatalf("ParseBase64(%q, %q) accepted a non-canonical spelling of %q", prefix, s, got)
			}
		}
		if sig, err := verify.ParseHex(prefix, s); err == nil {
			again, err := verify.ParseHex(prefix, verify.FormatHex(prefix, sig))
			if len(sig) != 32 || err != nil || !bytes.Equal(again, sig) {
				t.Fatalf("hex round trip of %q under %q: %x, %v", s, prefix, again, err)
			}
		}
		if sig := sig32(raw); sig != nil {
			got, err := verify.ParseBase64(prefix, verify.FormatBase64(prefix, sig))
			if err != nil || !bytes.Equal(got, sig) {
				t.Fatalf("FormatBase64/ParseBase64(%q, %x)=%x, %v", prefix, sig, got, err)
			}
			got, err = verify.ParseHex(prefix, verify.FormatHex(prefix, sig))
			if err != nil || !bytes.Equal(got, sig) {
				t.Fatalf("FormatHex/ParseHex(%q, %x)=%x, %v", prefix, sig, got, err)
			}
		}
	})
}

// FuzzParseStripe covers Stripe-Signature the same way.
func FuzzParseStripe(f *testing.F) {
	f.Add("t=1492774577,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd,v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39", uint64(1), []byte{})
	f.Add("t=123,v1="+hex64+",v1="+hex64, uint64(123), bytes.Repeat([]byte{7}, 64))
	f.Add("t=,v1=", uint64(0), []byte{})
	f.Add("t=1,t=2,v1=x", uint64(1<<40), []byte{})
	f.Add(",,,=,", uint64(99), bytes.Repeat([]byte{1}, 32))
	f.Fuzz(func(t *testing.T, s string, unix uint64, raw []byte) {
		if ts, n, v1, err := verify.ParseStripe(s); err == nil {
			if m, err := verify.ParseUnix(ts); err != nil || m != n {
				t.Fatalf("ParseStripe(%q): t=%q unix=%d", s, ts, n)
			}
			if len(v1) == 0 {
				t.Fatalf("ParseStripe(%q): no v1 and no error", s)
			}
			ts2, n2, v12, err := verify.ParseStripe(verify.FormatStripe(ts, v1))
			if err != nil || ts2 != ts || n2 != n || !equalSigs(v12, v1) {
				t.Fatalf("round trip of %q: %q %d %x %v", s, ts2, n2, v12, err)
			}
		}
		if sig := sig32(raw); sig != nil {
			ts := strconv.FormatUint(unix%1e17, 10)
			sigs := [][]byte{sig, sig32(append(raw[32:], raw...))}
			gotTS, _, got, err := verify.ParseStripe(verify.FormatStripe(ts, sigs))
			if err != nil || gotTS != ts || !equalSigs(got, sigs) {
				t.Fatalf("FormatStripe/ParseStripe(%s, %x)=%q %x %v", ts, sigs, gotTS, got, err)
			}
		}
	})
}

// FuzzParseStandard covers webhook-signature the same way.
func FuzzParseStandard(f *testing.F) {
	f.Add(swSignature, []byte{})
	f.Add("v1,"+otherB64+" v1a,xyz v2,"+otherB64, bytes.Repeat([]byte{3}, 32))
	f.Add("v1, v1,, ,", []byte{})
	f.Add("v1,AAAA====", bytes.Repeat([]byte{9}, 70))
	f.Fuzz(func(t *testing.T, s string, raw []byte) {
		if sigs, err := verify.ParseStandard(s); err == nil {
			for _, sig := range sigs {
				if len(sig) != 32 {
					t.Fatalf("ParseStandard(%q) gave a %d-byte signature", s, len(sig))
				}
			}
			again, err := verify.ParseStandard(verify.FormatStandard(sigs))
			if err != nil || !equalSigs(again, sigs) {
				t.Fatalf("round trip of %q: %x, %v", s, again, err)
			}
		}
		if sig := sig32(raw); sig != nil {
			got, err := verify.ParseStandard(verify.FormatStandard([][]byte{sig}))
			if err != nil || !equalSigs(got, [][]byte{sig}) {
				t.Fatalf("FormatStandard/ParseStandard(%x)=%x, %v", sig, got, err)
			}
		}
	})
}

// FuzzVerify hands every scheme arbitrary header values: it must never
// panic, and every failure must wrap ErrSignature.
func FuzzVerify(f *testing.F) {
	f.Add("t=1700000000,v1="+hex64, "1700000000", "msg_1", "v0="+hex64, []byte("{}"))
	f.Add(githubSignature, "", "", swSignature, []byte(githubPayload))
	f.Add("", "-1", "\x00", "v1,", []byte(nil))
	f.Add(indBase64, "", "", "v1="+indBase64, []byte(indBody))
	var verifiers []*verify.Verifier
	for _, s := range schemes {
		verifiers = append(verifiers, mustNew(f, s.config(s.secrets[0], s.secrets[1])))
	}
	// hmac-sha256 in its other formats reads X-Signature too.
	for _, enc := range []string{verify.EncodingHex, verify.EncodingBase64} {
		for _, prefix := range []string{"", "v1="} {
			verifiers = append(verifiers, mustNew(f, verify.Config{Scheme: verify.SchemeHMACSHA256,
				Encoding: enc, Prefix: &prefix, Secrets: []string{"fuzz-secret"}}))
		}
	}
	f.Fuzz(func(t *testing.T, sig, ts, id, sig2 string, body []byte) {
		h := http.Header{}
		for _, name := range []string{"X-Signature", "X-Hub-Signature-256", "Stripe-Signature", "X-Shopify-Hmac-Sha256"} {
			h.Set(name, sig)
		}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sig2)
		h.Set("X-Slack-Request-Timestamp", ts)
		h.Set("X-Slack-Signature", sig2)
		for _, v := range verifiers {
			if err := v.Verify(h, body, time.Unix(1_700_000_000, 0)); err != nil && !errors.Is(err, verify.ErrSignature) {
				t.Fatalf("%s: err=%v does not wrap ErrSignature", v.Scheme(), err)
			}
		}
	})
}
