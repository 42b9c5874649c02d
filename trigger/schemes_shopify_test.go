package trigger_test

import (
	"context"
	"encoding/json"
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

// TestShopifyThroughIntake sends Shopify's own library vector
// (verify/VECTORS.md) through the real intake: the signed request is
// enqueued under its X-Shopify-Webhook-Id, the same signature over another
// body is 401 TriggerSignatureInvalid and creates nothing. A second trigger
// reads a base64 signature with a custom prefix through hmac-sha256.
func TestShopifyThroughIntake(t *testing.T) {
	env := map[string]string{"SHOP": "test_secret_key", "ACME": "acme-secret"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	prog := `{"air_version": "touba-air-v1", "triggers": [
	  {"ref": "trigger:s/shopify", "source": {"kind": "webhook", "verify": {"scheme": "shopify", "secrets": [{"env": "ACME"}, {"env": "SHOP"}]}},
	   "steps": [{"id": "s", "tool": "tool:x/Y"}]},
	  {"ref": "trigger:s/acme", "source": {"kind": "webhook", "event_id": {"json_pointer": "/id"},
	   "verify": {"scheme": "hmac-sha256", "header": "X-Acme-Signature", "encoding": "base64", "prefix": "v1=", "secret": {"env": "ACME"}}},
	   "steps": [{"id": "s", "tool": "tool:x/Y"}]}]}`
	p, err := trigger.ParseProgram("p.json", []byte(prog))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := trigger.NewConfig(p, lookup, &secret.Set{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx := context.Background()
	q, err := queue.Open(ctx, filepath.Join(dir, "q.sqlite"), queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	st, err := state.Open(ctx, filepath.Join(dir, "s.sqlite"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	in := &trigger.Intake{Queue: q, Log: st}
	in.SetConfig(cfg)
	srv := httptest.NewServer(in.Router(nil))
	defer srv.Close()

	type answer struct {
		Status string `json:"status"`
		Error  struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	send := func(name, body string, header http.Header) (int, answer) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/triggers/s/"+name, strings.NewReader(body))
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a answer
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			t.Fatalf("%s: answer: %v", name, err)
		}
		return resp.StatusCode, a
	}
	count := func() int {
		t.Helper()
		entries, err := q.List(ctx, touba.EntryFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}

	// Shopify: the library vector, byte for byte.
	shop := http.Header{}
	shop.Set("Content-Type", "application/json")
	shop.Set("X-Shopify-Topic", "products/create")
	shop.Set("X-Shopify-Hmac-Sha256", "B23tXN681gZ0qIWNRrgtzBE9XSDo5yaUu6wfmhu3a7g=")
	shop.Set("X-Shopify-Webhook-Id", "123456789")
	if code, a := send("shopify", `{"foo": "bar"}`, shop); code != 202 || a.Status != "enqueued" {
		t.Fatalf("signed shopify request: %d %+v, want 202 enqueued", code, a)
	}
	tampered := shop.Clone()
	tampered.Set("X-Shopify-Webhook-Id", "123456790") // a new delivery, so only the signature can refuse it
	if code, a := send("shopify", `{"foo": "baz"}`, tampered); code != 401 || a.Error.Code != touba.ETriggerSignatureInvalid {
		t.Fatalf("tampered shopify request: %d %+v, want 401 %s", code, a, touba.ETriggerSignatureInvalid)
	}
	noSig := shop.Clone()
	noSig.Del("X-Shopify-Hmac-Sha256")
	noSig.Set("X-Shopify-Webhook-Id", "123456791")
	if code, a := send("shopify", `{"foo": "bar"}`, noSig); code != 401 || a.Error.Code != touba.ETriggerSignatureInvalid {
		t.Fatalf("unsigned shopify request: %d %+v, want 401", code, a)
	}

	// hmac-sha256, base64 with prefix v1=, signed the way SignRequest does.
	body := `{"id": "evt_acme_1"}`
	v1 := "v1="
	acme := http.Header{}
	if err := verify.SignRequest(verify.Config{Scheme: verify.SchemeHMACSHA256, Header: "X-Acme-Signature",
		Encoding: verify.EncodingBase64, Prefix: &v1, Secrets: []string{"acme-secret"}}, acme, []byte(body), time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(acme.Get("X-Acme-Signature"), "v1=") || !strings.HasSuffix(acme.Get("X-Acme-Signature"), "=") {
		t.Fatalf("X-Acme-Signature=%q, want v1=<base64>", acme.Get("X-Acme-Signature"))
	}
	if code, a := send("acme", body, acme); code != 202 || a.Status != "enqueued" {
		t.Fatalf("signed acme request: %d %+v, want 202 enqueued", code, a)
	}
	if code, a := send("acme", `{"id": "evt_acme_2"}`, acme); code != 401 || a.Error.Code != touba.ETriggerSignatureInvalid {
		t.Fatalf("tampered acme request: %d %+v, want 401", code, a)
	}

	// Only the two signed requests made entries, each under its sender's id.
	entries, err := q.List(ctx, touba.EntryFilter{})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, e := range entries {
		ids[e.TriggerRef] = e.EventID
	}
	if got := count(); got != 2 || ids["trigger:s/shopify"] != "123456789" || ids["trigger:s/acme"] != "evt_acme_1" {
		t.Fatalf("%d entries, identities %v: want shopify's X-Shopify-Webhook-Id and acme's /id", got, ids)
	}
	st.Flush(ctx)
	rows, _ := st.Deliveries(ctx, touba.LogFilter{Code: touba.ETriggerSignatureInvalid, Limit: 100})
	if len(rows) != 3 {
		t.Fatalf("%d signature rejections logged, want 3", len(rows))
	}
}
