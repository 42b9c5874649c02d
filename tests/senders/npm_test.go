package senders_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

// The senders' own signing libraries, from the npm registry, at the major
// versions these tests were written against.
var senderPackages = []string{"stripe@23", "@octokit/webhooks-methods@6", "standardwebhooks@1"}

// sendersProgram has one trigger per scheme, each with the scheme's
// default event id (required by default).
const sendersProgram = `{
  "air_version": "touba-air-v1",
  "triggers": [
    {"ref": "trigger:npm/stripe", "source": {"kind": "webhook", "verify": {"scheme": "stripe", "secret": {"file": "stripe-secret"}}},
     "steps": [{"id": "s", "tool": "tool:npm/Stub"}]},
    {"ref": "trigger:npm/github", "source": {"kind": "webhook", "verify": {"scheme": "github", "secret": {"file": "github-secret"}}},
     "steps": [{"id": "s", "tool": "tool:npm/Stub"}]},
    {"ref": "trigger:npm/standard", "source": {"kind": "webhook", "verify": {"scheme": "standard-webhooks", "secret": {"file": "standard-secret"}}},
     "steps": [{"id": "s", "tool": "tool:npm/Stub"}]}
  ]
}`

const sendersManifest = `{
  "manifest_version": "touba-manifest-v1",
  "bindings": {"tool:npm/Stub": {"handler": {"kind": "accounting_stub"}, "timeout_ms": 5000,
    "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}
}`

// signScript prints, as JSON, the headers one sender's own library puts on
// a delivery of the body in FILE: node sign-with.mjs KIND SECRET FILE ID.
const signScript = `import { readFileSync } from "node:fs";
const [kind, secret, file, id] = process.argv.slice(2);
const payload = readFileSync(file, "utf8");
let headers;
switch (kind) {
  case "stripe": {
    const { default: Stripe } = await import("stripe");
    headers = { "Stripe-Signature": new Stripe("sk_test_unused").webhooks.generateTestHeaderString({ payload, secret }) };
    break;
  }
  case "github": {
    const { sign } = await import("@octokit/webhooks-methods");
    headers = { "X-Hub-Signature-256": await sign(secret, payload), "X-GitHub-Delivery": id, "X-GitHub-Event": "push" };
    break;
  }
  case "standard": {
    const { Webhook } = await import("standardwebhooks");
    const at = new Date();
    headers = { "webhook-id": id, "webhook-timestamp": String(Math.floor(at.getTime() / 1000)),
                "webhook-signature": new Webhook(secret).sign(id, at, payload) };
    break;
  }
}
process.stdout.write(JSON.stringify(headers));
`

// installSenders installs the senders' packages into a temporary folder
// with npm, or skips the test saying why it could not.
func installSenders(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("signing with the senders' npm packages needs %s: %v", tool, err)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"private": true, "type": "module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", append([]string{"install", "--no-audit", "--no-fund", "--loglevel=error"}, senderPackages...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("npm install %s failed (no registry?), so the senders' own signatures are not checked: %v\n%s",
			strings.Join(senderPackages, " "), err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "sign-with.mjs"), []byte(signScript), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestSendersOwnLibraries: requests signed by Stripe's Node library
// (stripe.webhooks.generateTestHeaderString), GitHub's
// (@octokit/webhooks-methods sign) and Standard Webhooks' (standardwebhooks,
// as Svix signs) are accepted by the stripe, github and standard-webhooks
// schemes, identified by each scheme's own id; the same delivery again is
// a duplicate of the same entry, and a tampered body is refused.
func TestSendersOwnLibraries(t *testing.T) {
	js := installSenders(t)
	dir := t.TempDir()
	secrets := map[string]string{
		"stripe":   "whsec_test_secret_for_the_stripe_library_5b2e",
		"github":   "github-test-secret-for-octokit-91ad",
		"standard": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	}
	for name, v := range secrets {
		if err := os.WriteFile(filepath.Join(dir, name+"-secret"), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, text := range map[string]string{"program.air.json": sendersProgram, "touba.manifest.json": sendersManifest} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d := testkit.StartServer(t, server.Config{Program: filepath.Join(dir, "program.air.json"),
		Manifest: filepath.Join(dir, "touba.manifest.json"), Queue: filepath.Join(dir, "q.sqlite"),
		State: filepath.Join(dir, "s.sqlite"), Journal: filepath.Join(dir, "j.sqlite"),
		AdminSocket: filepath.Join(dir, "admin.sock")}) // no workers: entries stay pending

	for _, kind := range []string{"stripe", "github", "standard"} {
		t.Run(kind, func(t *testing.T) {
			id := "evt_npm_" + kind
			body := fmt.Sprintf(`{"id": %q, "object": "event", "type": "ping", "data": {"n": 1}}`, id)
			file := filepath.Join(dir, kind+".json")
			if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("node", "sign-with.mjs", kind, secrets[kind], file, id)
			cmd.Dir = js
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("sign with the %s library: %v\n%s", kind, err, out)
			}
			var hs map[string]string
			if err := json.Unmarshal(out, &hs); err != nil {
				t.Fatalf("sign-with.mjs %s printed %q: %v", kind, out, err)
			}
			h := http.Header{"Content-Type": {"application/json"}}
			for k, v := range hs {
				h.Set(k, v)
			}
			url := d.URL() + "/triggers/npm/" + kind
			send := func(body string) reply {
				t.Helper()
				req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
				req.Header = h.Clone()
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var a struct {
					QueueID string `json:"queue_id"`
					Status  string `json:"status"`
					Error   struct {
						Code    string `json:"code"`
						QueueID string `json:"queue_id"`
					} `json:"error"`
				}
				json.NewDecoder(resp.Body).Decode(&a)
				return reply{status: resp.StatusCode, result: a.Status + a.Error.Code, queueID: a.QueueID + a.Error.QueueID}
			}
			first := send(body)
			want(t, "signed by the "+kind+" library", first, http.StatusAccepted, touba.IntakeEnqueued, "")
			want(t, "the same delivery again", send(body), http.StatusAccepted, touba.IntakeDuplicate, first.queueID)
			want(t, "tampered body", send(strings.Replace(body, `"n": 1`, `"n": 2`, 1)), http.StatusUnauthorized, touba.ETriggerSignatureInvalid, "")
			// Identified by the scheme's own id: intake logs the pair.
			logged := fmt.Sprintf(`"event_id":%q,"queue_id":%q`, id, first.queueID)
			testkit.WaitFor(t, 10*time.Second, func() bool { return strings.Contains(d.Log(), logged) }, "intake to log "+logged)
		})
	}
}
