// Package shopify_test runs the Shopify example (examples/shopify, SPEC
// §2.1 debounce) as shipped through the real touba-trigger binary over real
// HTTP: signed products/update storms of two products, each gathered into
// one sync call of the example's own handler with every webhook and the
// product's last state; a bad signature refused, another topic filtered,
// Shopify's retry of a merged delivery acknowledged without a second run.
package shopify_test

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/testkit"
)

// handlerBin is the example's handler, built once.
var handlerBin string

func TestMain(m *testing.M) {
	gobuild.Main(m, map[string]*string{"../../examples/shopify/handler": &handlerBin})
}

const secret = "shpss_test_client_secret"

// example is a copy of examples/shopify with the handler built into bin/.
type example struct {
	t   *testing.T
	dir string
	d   *testkit.Daemon
}

func newExample(t *testing.T) *example {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"program.air.json", "touba.manifest.json"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "examples", "shopify", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(handlerBin, filepath.Join(dir, "bin", "handler")); err != nil {
		t.Fatal(err)
	}
	e := &example{t: t, dir: dir}
	e.d = testkit.Start(t, []string{"SHOPIFY_WEBHOOK_SECRET=" + secret}, "serve", filepath.Join(dir, "program.air.json"),
		"--manifest", filepath.Join(dir, "touba.manifest.json"), "--queue", filepath.Join(dir, "q.sqlite"),
		"--state", filepath.Join(dir, "s.sqlite"), "--effect-journal", filepath.Join(dir, "j.sqlite"),
		"--admin-socket", filepath.Join(dir, "admin.sock"), "--listen", "127.0.0.1:0", "--metrics-listen", "",
		"--allow-unisolated-handlers", "--log-level", "info")
	return e
}

// send posts a Shopify webhook of topic for product id (its title's edit
// n), signed with key, under webhook id wid; it returns the status and
// the answer's queue id.
func (e *example) send(topic, wid string, id int64, n int, key string) (int, string) {
	e.t.Helper()
	body := fmt.Sprintf(`{"id":%d,"title":"T-Shirt (edit %d)","updated_at":"2026-03-01T12:00:%02dZ"}`, id, n, n)
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(body))
	req, err := http.NewRequest(http.MethodPost, e.d.URL()+"/triggers/examples.shopify/ProductsUpdate", strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range map[string]string{"Content-Type": "application/json", "X-Shopify-Topic": topic,
		"X-Shopify-Shop-Domain": "example.myshopify.com", "X-Shopify-API-Version": "2025-01", "X-Shopify-Webhook-Id": wid,
		"X-Shopify-Hmac-Sha256": base64.StdEncoding.EncodeToString(mac.Sum(nil))} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var a struct {
		QueueID string `json:"queue_id"`
	}
	json.NewDecoder(resp.Body).Decode(&a)
	return resp.StatusCode, a.QueueID
}

// sync is one line the handler wrote to the catalog.
type sync struct {
	ProductID int64    `json:"product_id"`
	Title     string   `json:"title"`
	Updates   int      `json:"updates"`
	Webhooks  []string `json:"webhook_ids"`
	Shop      string   `json:"shop"`
	Repeat    bool     `json:"repeat"`
}

func (e *example) catalog() []sync {
	f, err := os.Open(filepath.Join(e.dir, ".touba", "catalog.jsonl"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []sync
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s sync
		if json.Unmarshal(sc.Bytes(), &s) == nil {
			out = append(out, s)
		}
	}
	return out
}

// TestShopifyExample: eight saves of one product and two of another make
// two sync calls, each with every webhook of its product in order and the
// product's last title; the merged deliveries name their carrier.
func TestShopifyExample(t *testing.T) {
	const a, b = int64(788032119674292922), int64(632910392)
	e := newExample(t)
	var wids []string
	var carrier string
	for n := 1; n <= 8; n++ {
		wid := fmt.Sprintf("a-%d", n)
		status, qid := e.send("products/update", wid, a, n, secret)
		if status != http.StatusAccepted {
			t.Fatalf("update %d of product a: %d, want 202", n, status)
		}
		if n == 1 {
			carrier = qid
		}
		wids = append(wids, wid)
		if n <= 2 {
			if status, _ := e.send("products/update", fmt.Sprintf("b-%d", n), b, n, secret); status != http.StatusAccepted {
				t.Fatalf("update %d of product b: %d, want 202", n, status)
			}
		}
	}
	if status, _ := e.send("products/update", "forged", a, 9, "not the secret"); status != http.StatusUnauthorized {
		t.Fatalf("a forged webhook: %d, want 401", status)
	}
	if status, _ := e.send("products/create", "create-1", a, 10, secret); status != http.StatusAccepted {
		t.Fatalf("another topic: %d, want 202 filtered", status)
	}
	if status, qid := e.send("products/update", "a-5", a, 5, secret); status != http.StatusOK || qid == carrier || qid == "" {
		t.Fatalf("Shopify's retry of a merged update: %d %s, want 200 consumed for its own entry", status, qid)
	}

	var got []sync
	testkit.WaitFor(t, 60*time.Second, func() bool { got = e.catalog(); return len(got) >= 2 }, "both products synced")
	slices.SortFunc(got, func(x, y sync) int { return len(y.Webhooks) - len(x.Webhooks) })
	if s := got[0]; s.ProductID != a || s.Updates != 8 || !slices.Equal(s.Webhooks, wids) || s.Title != "T-Shirt (edit 8)" ||
		s.Shop != "example.myshopify.com" || s.Repeat {
		t.Fatalf("product a's sync: %+v, want its 8 webhooks in order and the last title", s)
	}
	if s := got[1]; s.ProductID != b || s.Updates != 2 || !slices.Equal(s.Webhooks, []string{"b-1", "b-2"}) || s.Title != "T-Shirt (edit 2)" {
		t.Fatalf("product b's sync: %+v", s)
	}

	var shown struct {
		Status    string `json:"status"`
		Gathering struct {
			Size   int `json:"size"`
			Merged []struct {
				EventID string `json:"event_id"`
			} `json:"merged"`
		} `json:"gathering"`
	}
	testkit.WaitFor(t, 30*time.Second, func() bool {
		out, err := exec.Command(testkit.Binary(t), "queue", "show", carrier, "--json", "--admin-socket", filepath.Join(e.dir, "admin.sock")).Output()
		if err != nil || json.Unmarshal(out, &shown) != nil {
			t.Fatalf("queue show %s: %v\n%s", carrier, err, out)
		}
		return shown.Status == "done"
	}, "product a's carrier done")
	if shown.Status != "done" || shown.Gathering.Size != 8 || len(shown.Gathering.Merged) != 7 || shown.Gathering.Merged[0].EventID != "a-2" {
		t.Fatalf("queue show of product a's carrier: %+v", shown)
	}
	e.d.Signal(syscall.SIGTERM)
	if code := e.d.Wait(30 * time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d", code)
	}
	if n := len(e.catalog()); n != 2 {
		t.Fatalf("%d syncs, want 2", n)
	}
}

// TestShopifyExampleChecks: the example as shipped passes `check`, which
// says how it debounces.
func TestShopifyExampleChecks(t *testing.T) {
	dir := filepath.Join("..", "..", "examples", "shopify")
	cmd := exec.Command(testkit.Binary(t), "check", filepath.Join(dir, "program.air.json"), "--manifest", filepath.Join(dir, "touba.manifest.json"))
	cmd.Env = append(os.Environ(), "SHOPIFY_WEBHOOK_SECRET="+secret)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("check examples/shopify: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "debounce per /event/body/id: a run 5s after the last delivery, at most 1m0s after the first") {
		t.Fatalf("check does not say how the trigger debounces:\n%s", out)
	}
}
