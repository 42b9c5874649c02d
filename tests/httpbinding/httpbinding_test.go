// Package httpbinding_test runs http bindings (SPEC §2.2 kind "http") in
// the real daemon against a real HTTP API on loopback: in process with the
// console on, to see what is stored and shown, and as the real binary, for
// --egress-deny, TOUBA_EGRESS_DENY and HTTP_PROXY.
package httpbinding_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

// TestMain removes the daemon binary testkit builds once the tests end.
func TestMain(m *testing.M) { gobuild.Main(m, nil) }

// The bearer token of the orders API, and the console's token.
const (
	ordersToken  = "tok_orders_live_8c1f5e2a9d"
	consoleToken = "console-token-for-the-http-binding-test"
)

// program posts each delivery's order to tool:orders/MarkPaid.
const program = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:shop/Paid", "source": {"kind": "webhook"},
   "steps": [{"id": "mark", "tool": "tool:orders/MarkPaid",
     "input": {"order_id": {"$ref": "/event/body/order"}, "amount": {"$ref": "/event/body/amount"}}}],
   "retry": {"max_attempts": 2, "initial_interval_ms": 10, "max_interval_ms": 50}}]}`

// manifest is the http binding: PUT to url (a template), the bearer token
// from the secret ORDERS_API_TOKEN.
func manifest(url string) string {
	return `{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:orders/MarkPaid": {"handler": {"kind": "http", "options": {"method": "PUT", "url": "` + url + `",
      "headers": {"Authorization": {"secret": "ORDERS_API_TOKEN", "format": "Bearer %s"}}, "timeout_sec": 5}},
    "secrets": {"ORDERS_API_TOKEN": {"env": "HTTPB_ORDERS_TOKEN"}},
    "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`
}

// orders is the orders API: it records what it receives and answers 201,
// or 422 to the order "bad".
type orders struct {
	*httptest.Server
	mu   sync.Mutex
	seen []*http.Request
}

func newOrders(t *testing.T) *orders {
	t.Helper()
	o := &orders{}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		o.mu.Lock()
		o.seen = append(o.seen, r)
		o.mu.Unlock()
		if strings.Contains(r.URL.EscapedPath(), "/bad/") {
			http.Error(w, `{"error": "order is closed"}`, http.StatusUnprocessableEntity)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", r.URL.EscapedPath())
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"status": "paid"}`)
	}))
	t.Cleanup(o.Close)
	return o
}

func (o *orders) requests() []*http.Request {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*http.Request(nil), o.seen...)
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The daemon PUTs each order to the API with the bearer token from the
// secret and the effect id as Idempotency-Key, the order id percent-encoded
// as one path segment: a 201 is applied, a 422 fails the entry
// HttpRejected with the status in the journal, an order id that is an
// object fails it StepInputUnresolved before anything is sent. The console shows the request each effect sent, without the path
// or the token; the token is in no log line, no page, no CLI output and no
// byte of the daemon's files.
func TestHTTPBindingInTheDaemon(t *testing.T) {
	api := newOrders(t)
	dir := t.TempDir()
	t.Setenv("HTTPB_ORDERS_TOKEN", ordersToken)
	cfg := server.Config{Program: writeFile(t, dir, "program.air.json", program),
		Manifest: writeFile(t, dir, "touba.manifest.json", manifest(api.URL+"/orders/{/order_id}/payment")),
		Queue:    filepath.Join(dir, "q.sqlite"), State: filepath.Join(dir, "s.sqlite"), Journal: filepath.Join(dir, "j.sqlite"),
		AdminSocket: filepath.Join(dir, "admin.sock"), Workers: 2, ConsoleListen: "127.0.0.1:0", ConsoleToken: []byte(consoleToken)}
	srv := testkit.StartServer(t, cfg)
	url := srv.URL() + "/triggers/shop/Paid"
	_, okID := testkit.Post(t, url, "evt-1", `{"order": "A-1/x y", "amount": 2000}`)
	_, badID := testkit.Post(t, url, "evt-2", `{"order": "bad", "amount": 1}`)
	_, objID := testkit.Post(t, url, "evt-3", `{"order": {"id": "A-2"}, "amount": 1}`)
	console := "http://" + srv.ConsoleAddr().String()
	adm, err := admin.Dial(cfg.AdminSocket)
	if err != nil {
		t.Fatal(err)
	}
	entryStatus := func(id string) string {
		d, err := adm.Entry(context.Background(), id)
		if err != nil {
			return err.Error()
		}
		return d.Status
	}
	testkit.WaitFor(t, 30*time.Second, func() bool {
		return entryStatus(okID) == touba.StatusDone && entryStatus(badID) == touba.StatusFailed && entryStatus(objID) == touba.StatusFailed
	}, "the three entries done, failed, failed")

	reqs := api.requests()
	if len(reqs) != 2 {
		t.Fatalf("the API received %d requests, want 2 (the object id never sent)", len(reqs))
	}
	var r *http.Request
	for _, q := range reqs { // two workers: in either order
		if q.URL.EscapedPath() == "/orders/A-1%2Fx%20y/payment" {
			r = q
		}
	}
	if r == nil || r.Method != http.MethodPut || r.Header.Get("Authorization") != "Bearer "+ordersToken ||
		r.Header.Get("Idempotency-Key") != okID+":mark" {
		t.Fatalf("the API did not receive PUT /orders/A-1%%2Fx%%20y/payment with the bearer and key %s:mark", okID)
	}

	// What the console shows: the entry's error, and the request sent.
	effectPage := get(t, console, "/effects/"+okID+"/"+okID+":mark")
	host := strings.TrimPrefix(api.URL, "http://")
	wantReq := "PUT http://" + host + "/… Authorization: &lt;secret ORDERS_API_TOKEN&gt;, Content-Type: application/json, Idempotency-Key: &lt;effect id&gt;"
	if !strings.Contains(effectPage, wantReq) {
		t.Errorf("the effect page does not show the request %q:\n%s", wantReq, effectPage)
	}
	badPage := get(t, console, "/entries/"+badID)
	for _, want := range []string{touba.EHttpRejected, "http_status=422", "422 Unprocessable Entity"} {
		if !strings.Contains(badPage, want) {
			t.Errorf("the failed entry's page lacks %q", want)
		}
	}
	objPage := get(t, console, "/entries/"+objID)
	if !strings.Contains(objPage, touba.EStepInputUnresolved) {
		t.Errorf("the object entry's page lacks StepInputUnresolved")
	}
	okDetail, err := adm.Entry(context.Background(), okID)
	if err != nil {
		t.Fatal(err)
	}
	api2, _ := json.Marshal(okDetail)
	shown := effectPage + badPage + objPage + get(t, console, "/entries/"+okID) + string(api2)
	if !strings.Contains(string(api2), `"request":"PUT http://`+host+`/…`) {
		t.Errorf("the admin API's effect has no request: %s", api2)
	}
	if strings.Contains(shown, ordersToken) {
		t.Errorf("a console page or the admin API shows the token")
	}
	if _, line, _ := strings.Cut(effectPage, `id="effect-request"`); !strings.Contains(line, "</dd>") ||
		strings.Contains(line[:strings.Index(line, "</dd>")], "A-1") {
		t.Errorf("the effect page's request line is missing or shows the request's path")
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(srv.Log(), ordersToken) {
		t.Errorf("the log holds the token")
	}
	_, events := testkit.Effects(t, cfg.Journal)
	var dispatched, outcome string
	for _, ev := range events[badID+":mark"] {
		switch ev.State {
		case touba.EffectDispatched:
			dispatched = ev.Detail
		case touba.EffectNotApplied:
			outcome = ev.Detail
		}
	}
	if touba.RequestOf(dispatched) == "" || !strings.Contains(outcome, "error_code="+touba.EHttpRejected) || !strings.Contains(outcome, "http_status=422") {
		t.Errorf("journal events of the rejected effect: dispatched %q, outcome %q", dispatched, outcome)
	}
	// Refused before sending: prepared, then not_applied, never dispatched.
	if ev := events[objID+":mark"]; len(ev) != 2 || ev[0].State != touba.EffectPrepared || ev[1].State != touba.EffectNotApplied ||
		!strings.Contains(ev[1].Detail, "error_code="+touba.EStepInputUnresolved) {
		t.Errorf("the object entry's effect events: %+v", ev)
	}
	noTokenInFiles(t, dir)
}

// get fetches a page of the console with the console's token.
func get(t *testing.T, console, path string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, console+path, nil)
	req.Header.Set("Authorization", "Bearer "+consoleToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// noTokenInFiles reads every byte of every file the daemon wrote under dir
// (the SQLite files and their WAL) and fails if one holds the token.
func noTokenInFiles(t *testing.T, dir string) {
	t.Helper()
	n := 0
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".json") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil // the socket
		}
		n++
		if bytes.Contains(b, []byte(ordersToken)) {
			t.Errorf("%s holds the token", path)
		}
		return nil
	})
	if n < 3 {
		t.Fatalf("read %d files, want at least the queue, state and journal", n)
	}
}
