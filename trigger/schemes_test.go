package trigger_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
	"github.com/touba/touba-trigger/trigger"
	"github.com/touba/touba-trigger/verify"
)

// TestSchemesThroughIntake sends requests signed the way each sender signs
// them through the real intake, with secrets resolved from the program
// (two secrets: the second one signs, as during a rotation).
func TestSchemesThroughIntake(t *testing.T) {
	const whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // the Standard Webhooks reference vector's key
	env := map[string]string{"OLD": "old-secret-value", "NEW": "new-secret-value", "WH": whsec}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	prog := `{"air_version": "touba-air-v1", "triggers": [
	  {"ref": "trigger:s/github", "source": {"kind": "webhook", "verify": {"scheme": "github", "secrets": [{"env": "OLD"}, {"env": "NEW"}]}},
	   "steps": [{"id": "s", "tool": "tool:x/Y"}]},
	  {"ref": "trigger:s/stripe", "source": {"kind": "webhook", "verify": {"scheme": "stripe", "secrets": [{"env": "OLD"}, {"env": "NEW"}]}},
	   "steps": [{"id": "s", "tool": "tool:x/Y"}]},
	  {"ref": "trigger:s/standard", "source": {"kind": "webhook", "verify": {"scheme": "standard-webhooks", "secret": {"env": "WH"}}},
	   "steps": [{"id": "s", "tool": "tool:x/Y"}]},
	  {"ref": "trigger:s/slack", "source": {"kind": "webhook", "verify": {"scheme": "slack", "secrets": [{"env": "OLD"}, {"env": "NEW"}]}},
	   "steps": [{"id": "s", "tool": "tool:x/Y"}]},
	  {"ref": "trigger:s/hmac", "source": {"kind": "webhook", "verify": {"scheme": "hmac-sha256", "header": "X-Sig", "secrets": [{"env": "OLD"}, {"env": "NEW"}]}},
	   "steps": [{"id": "s", "tool": "tool:x/Y"}]}]}`
	p, err := trigger.ParseProgram("p.json", []byte(prog))
	if err != nil {
		t.Fatal(err)
	}
	secrets := &secret.Set{}
	cfg, err := trigger.NewConfig(p, lookup, secrets)
	if err != nil {
		t.Fatal(err)
	}
	if secrets.Len() != 3 || // OLD, NEW and WH, each once
		!secrets.Contains("x new-secret-value y") {
		t.Fatalf("resolved secrets not recorded: %d", secrets.Len())
	}
	dir := t.TempDir()
	q, err := queue.Open(context.Background(), filepath.Join(dir, "q.sqlite"), queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	st, err := state.Open(context.Background(), filepath.Join(dir, "s.sqlite"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	in := &trigger.Intake{Queue: q, Log: st}
	in.SetConfig(cfg)
	srv := httptest.NewServer(in.Router(nil))
	defer srv.Close()

	send := func(name, scheme, key, body string, tamper bool, at time.Time) int {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/triggers/s/"+name, strings.NewReader(body))
		vc := verify.Config{Scheme: scheme, Secrets: []string{key}}
		if scheme == verify.SchemeHMACSHA256 {
			vc.Header = "X-Sig"
		}
		if err := verify.SignRequest(vc, req.Header, []byte(body), at); err != nil {
			t.Fatal(err)
		}
		if scheme == verify.SchemeGitHub {
			// GitHub's own id, which the scheme requires by default.
			req.Header.Set("X-GitHub-Delivery", "delivery-"+body)
		}
		if tamper {
			req.Body = http.NoBody
			req.ContentLength = 0
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	now := time.Now()
	for _, tc := range []struct{ name, scheme, key string }{
		{"github", verify.SchemeGitHub, "new-secret-value"},
		{"stripe", verify.SchemeStripe, "old-secret-value"},
		{"standard", verify.SchemeStandardWebhooks, whsec},
		{"slack", verify.SchemeSlack, "new-secret-value"},
		{"hmac", verify.SchemeHMACSHA256, "old-secret-value"},
	} {
		body := `{"id": "evt_` + tc.name + `", "n": 1}`
		if got := send(tc.name, tc.scheme, tc.key, body, false, now); got != 202 {
			t.Errorf("%s: signed request got %d, want 202", tc.name, got)
		}
		// The tampered request has an empty body: Stripe's id is read from
		// it, and a missing required id is refused before the signature.
		tampered := 401
		if tc.scheme == verify.SchemeStripe {
			tampered = 400
		}
		if got := send(tc.name, tc.scheme, tc.key, body, true, now); got != tampered {
			t.Errorf("%s: tampered body got %d, want %d", tc.name, got, tampered)
		}
		wrong := "some-other-secret"
		if tc.scheme == verify.SchemeStandardWebhooks {
			wrong = "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
		}
		if got := send(tc.name, tc.scheme, wrong, body, false, now); got != 401 {
			t.Errorf("%s: wrong secret got %d, want 401", tc.name, got)
		}
		if tc.scheme == verify.SchemeStripe || tc.scheme == verify.SchemeSlack || tc.scheme == verify.SchemeStandardWebhooks {
			if got := send(tc.name, tc.scheme, tc.key, body, false, now.Add(-10*time.Minute)); got != 401 {
				t.Errorf("%s: stale timestamp got %d, want 401", tc.name, got)
			}
		}
	}
	// The scheme's own id is the identity: Stripe's /id, Standard Webhooks' webhook-id.
	entries, err := q.List(context.Background(), touba.EntryFilter{})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, e := range entries {
		ids[e.TriggerRef] = e.EventID
	}
	if ids["trigger:s/stripe"] != "evt_stripe" || !strings.HasPrefix(ids["trigger:s/standard"], "msg_") {
		t.Fatalf("identities %v: want stripe's /id and standard-webhooks' webhook-id", ids)
	}
	// Rejected signatures keep no body.
	st.Flush(context.Background())
	rows, _ := st.Deliveries(context.Background(), touba.LogFilter{Code: touba.ETriggerSignatureInvalid, Limit: 100})
	if len(rows) != 12 {
		t.Fatalf("%d signature rejections logged, want 12", len(rows))
	}
	for _, r := range rows {
		if r.BodyStored {
			t.Fatalf("body of a request that failed verification was stored: %+v", r)
		}
	}
}

// TestHeaderHoldingASecretIsNotKept: a sender that puts a configured
// secret in a header (a shared token) does not get it stored.
func TestHeaderHoldingASecretIsNotKept(t *testing.T) {
	secrets := &secret.Set{}
	secrets.Add("shared-token-value")
	p, err := trigger.ParseProgram("p.json", []byte(testProgram))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	q, err := queue.Open(context.Background(), filepath.Join(dir, "q.sqlite"), queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	in := &trigger.Intake{Queue: q}
	in.SetConfig(&trigger.Config{Program: p, Secrets: secrets})
	srv := httptest.NewServer(in.Router(nil))
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/triggers/t/plain", strings.NewReader(`{}`))
	req.Header.Set("X-Gitlab-Token", "shared-token-value")
	req.Header.Set("X-Other", "fine")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	entries, _ := q.List(context.Background(), touba.EntryFilter{})
	if len(entries) != 1 {
		t.Fatalf("%d entries", len(entries))
	}
	if _, ok := entries[0].Headers["x-gitlab-token"]; ok || entries[0].Headers["x-other"] != "fine" {
		t.Fatalf("headers kept: %v", entries[0].Headers)
	}
}
