package verify_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/verify"
)

// The senders' own libraries, pinned, for TestSenderLibraries. Stripe's
// library is checked by the stripe example's tests, not here.
var senderPackages = []string{
	"standardwebhooks@1.1.1",          // the Standard Webhooks reference library for JavaScript
	"@octokit/webhooks-methods@6.0.0", // GitHub's (Octokit's) sign and verify
	"@shopify/shopify-api@13.1.0",     // Shopify's app library: webhooks.validate and its test-helpers' getHmac
}

// crossScript signs every case with the senders' libraries and checks our
// signatures with their verify functions. It reads the cases from argv[2]
// and prints one JSON object.
const crossScript = `
import fs from 'node:fs';
import sw from 'standardwebhooks';
import { sign, verify } from '@octokit/webhooks-methods';
import '@shopify/shopify-api/adapters/web-api';
import { shopifyApi, ApiVersion, LogSeverity } from '@shopify/shopify-api';
import { getHmac } from '@shopify/shopify-api/test-helpers';
const input = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const shopify = shopifyApi({apiKey: 'cross-check', apiSecretKey: input.secret, hostName: 'example.com',
  apiVersion: ApiVersion.January25, isEmbeddedApp: false, logger: {level: LogSeverity.Error}});
const out = [];
for (const c of input.cases) {
  const wh = new sw.Webhook(input.whsec);
  const r = {};
  r.sw_signature = wh.sign(c.id, new Date(c.timestamp * 1000), c.body);
  r.gh_signature = await sign(input.secret, c.body);
  try {
    wh.verify(c.body, {'webhook-id': c.id, 'webhook-timestamp': String(c.timestamp), 'webhook-signature': c.our_sw});
    r.sw_accepts_ours = true;
  } catch (e) {
    r.sw_accepts_ours = false;
    r.sw_error = String(e);
  }
  r.gh_accepts_ours = await verify(input.secret, c.body, c.our_gh);
  r.shopify_signature = getHmac(c.body, input.secret);
  const req = new Request('https://example.com/webhooks', {method: 'POST', body: c.body, headers: {
    'X-Shopify-Hmac-Sha256': c.our_shopify, 'X-Shopify-Webhook-Id': c.our_shopify_id,
    'X-Shopify-Topic': 'orders/create', 'X-Shopify-API-Version': '2025-01', 'X-Shopify-Shop-Domain': 'cross-check.myshopify.com'}});
  r.shopify_validate = await shopify.webhooks.validate({rawBody: c.body, rawRequest: req});
  out.push(r);
}
console.log(JSON.stringify(out));
`

// TestSenderLibraries checks our github, standard-webhooks and shopify
// schemes against the senders' own JavaScript libraries, both ways: what
// they sign we accept, what SignRequest signs they accept. The packages are installed
// from the npm registry into a temporary directory; without node, npm or
// the registry the test is skipped, saying which.
func TestSenderLibraries(t *testing.T) {
	if testing.Short() {
		t.Skip("installs npm packages; skipped with -short")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found: cannot run the senders' JavaScript libraries")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm not found: cannot install the senders' JavaScript libraries")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, npm, append([]string{"install", "--prefix", dir, "--no-audit", "--no-fund",
		"--no-save", "--fetch-retries=0", "--fetch-timeout=30000", "--loglevel=error"}, senderPackages...)...)
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		t.Skipf("npm install %v failed (registry unreachable?): %v\n%s", senderPackages, err, out)
	}

	const secret = "cross-check-secret"
	whsec := whsec("cross-check-standard-webhooks-key")
	gh := verify.Config{Scheme: verify.SchemeGitHub, Secrets: []string{secret}}
	sw := verify.Config{Scheme: verify.SchemeStandardWebhooks, Secrets: []string{whsec}}
	shop := verify.Config{Scheme: verify.SchemeShopify, Secrets: []string{secret}}
	now := time.Now()
	type crossCase struct {
		ID        string `json:"id"`
		Timestamp int64  `json:"timestamp"`
		Body      string `json:"body"`
		OurSW     string `json:"our_sw"`
		OurGH     string `json:"our_gh"`
		OurShop   string `json:"our_shopify"`
		OurShopID string `json:"our_shopify_id"`
	}
	var cases []crossCase
	for i, body := range []string{
		`{"action":"opened","number":1}`,
		"{\"text\": \"caf\u00e9 \u2603 \U0001F600\"}\n", // non-ASCII UTF-8 and a trailing newline
		"{}", // octokit refuses an empty payload, which no sender signs
		`{"a":` + strconv.Quote(strings.Repeat("\u00e9t\u00e9 ", 500)) + `}`, // a few KiB
	} {
		id := "msg_cross_" + strconv.Itoa(i)
		h := http.Header{}
		h.Set("webhook-id", id)
		if err := verify.SignRequest(sw, h, []byte(body), now); err != nil {
			t.Fatal(err)
		}
		ghh := signedHeader(t, gh, []byte(body), now)
		shh := signedHeader(t, shop, []byte(body), now)
		cases = append(cases, crossCase{ID: id, Timestamp: now.Unix(), Body: body,
			OurSW: h.Get("webhook-signature"), OurGH: ghh.Get("X-Hub-Signature-256"),
			OurShop: shh.Get("X-Shopify-Hmac-Sha256"), OurShopID: shh.Get("X-Shopify-Webhook-Id")})
	}
	input, err := json.Marshal(map[string]any{"secret": secret, "whsec": whsec, "cases": cases})
	if err != nil {
		t.Fatal(err)
	}
	inPath, scriptPath := filepath.Join(dir, "cases.json"), filepath.Join(dir, "cross.mjs")
	if err := os.WriteFile(inPath, input, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(scriptPath, []byte(crossScript), 0o600); err != nil {
		t.Fatal(err)
	}
	run := exec.CommandContext(ctx, node, scriptPath, inPath)
	run.Dir = dir
	out, err := run.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("node: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("node: %v", err)
	}
	var results []struct {
		SWSignature   string `json:"sw_signature"`
		GHSignature   string `json:"gh_signature"`
		SWAcceptsOurs bool   `json:"sw_accepts_ours"`
		SWError       string `json:"sw_error"`
		GHAcceptsOurs bool   `json:"gh_accepts_ours"`
		ShopSignature string `json:"shopify_signature"`
		ShopValidate  struct {
			Valid     bool   `json:"valid"`
			Reason    string `json:"reason"`
			WebhookID string `json:"webhookId"`
		} `json:"shopify_validate"`
	}
	if err := json.Unmarshal(out, &results); err != nil || len(results) != len(cases) {
		t.Fatalf("node output %q: %v", out, err)
	}
	ghv, swv, shv := mustNew(t, gh), mustNew(t, sw), mustNew(t, shop)
	for i, r := range results {
		c := cases[i]
		h := http.Header{}
		h.Set("X-Hub-Signature-256", r.GHSignature)
		if err := ghv.Verify(h, []byte(c.Body), now); err != nil {
			t.Errorf("case %d: @octokit/webhooks-methods sign() gave %q, which we refuse: %v", i, r.GHSignature, err)
		}
		if r.GHSignature != c.OurGH {
			t.Errorf("case %d: @octokit/webhooks-methods signs %q, SignRequest %q", i, r.GHSignature, c.OurGH)
		}
		h = http.Header{}
		h.Set("webhook-id", c.ID)
		h.Set("webhook-timestamp", strconv.FormatInt(c.Timestamp, 10))
		h.Set("webhook-signature", r.SWSignature)
		if err := swv.Verify(h, []byte(c.Body), now); err != nil {
			t.Errorf("case %d: standardwebhooks sign() gave %q, which we refuse: %v", i, r.SWSignature, err)
		}
		if !r.SWAcceptsOurs {
			t.Errorf("case %d: standardwebhooks verify() refuses our %q: %s", i, c.OurSW, r.SWError)
		}
		if !r.GHAcceptsOurs {
			t.Errorf("case %d: @octokit/webhooks-methods verify() refuses our %q", i, c.OurGH)
		}
		h = http.Header{}
		h.Set("X-Shopify-Hmac-Sha256", r.ShopSignature)
		if err := shv.Verify(h, []byte(c.Body), now); err != nil {
			t.Errorf("case %d: @shopify/shopify-api getHmac() gave %q, which we refuse: %v", i, r.ShopSignature, err)
		}
		if v := r.ShopValidate; !v.Valid || v.WebhookID != c.OurShopID {
			t.Errorf("case %d: @shopify/shopify-api webhooks.validate() of our %q: %+v", i, c.OurShop, v)
		}
	}
}
