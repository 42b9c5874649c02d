// Package senders_test runs examples/stripe as its README walks through it:
// the real daemon on the example's program and manifest (one endpoint, a
// route per event type), its Node.js handler on sdk/js, its orders API
// called by an http binding whose body the program computes with CEL, and
// requests signed by the example's sign.mjs, and checks the answers a
// sender sees: new (202 enqueued), redelivered (200 consumed: the
// endpoint's own entry has no steps), conflicting (409), another type (202
// filtered), and that each event runs in exactly its route.
// npm_test.go signs with the senders' own npm packages.
package senders_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// The example's development secrets; the README uses the same ones.
const (
	webhookSecret = "whsec_dev_example_only_4f1c2a9e7b3d"
	ordersToken   = "orders_dev_token_only_7e2b91c4"
	triggerPath   = "/triggers/examples.stripe/Events"
)

func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// example is one test's copy of examples/stripe and the daemon's files.
type example struct {
	t   *testing.T
	dir string // the copy of examples/stripe
	run string // queue, state, journal and admin socket
}

// startOrdersAPI runs the example's orders_api.mjs in dir on a free port
// and returns its address.
func startOrdersAPI(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command("node", "orders_api.mjs")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "ORDERS_API_TOKEN=" + ordersToken, "PORT=0"}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		t.Fatalf("orders_api.mjs printed %q: %v", line, err)
	}
	return addr
}

// newExample copies examples/stripe into a temp dir laid out like the
// repository and makes node_modules/@touba/sdk the link `npm install`
// makes of the "file:../../sdk/js" dependency.
func newExample(t *testing.T) *example {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skipf("the stripe example needs node: %v", err)
	}
	root := moduleRoot()
	base := t.TempDir()
	dir := filepath.Join(base, "examples", "stripe")
	for _, f := range []string{"orders_api.mjs", "program.air.json", "touba.manifest.json", "package.json", "sign.mjs",
		"event.json", "event-changed.json", "refund.json", "subscription-deleted.json", "customer-created.json",
		"handlers/record_event.handler.mjs"} {
		b, err := os.ReadFile(filepath.Join(root, "examples", "stripe", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "touba.manifest.json" {
			// The orders API this test runs listens on a free port, not 8787.
			b = bytes.ReplaceAll(b, []byte("127.0.0.1:8787"), []byte(startOrdersAPI(t, dir)))
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(root, "sdk"), filepath.Join(base, "sdk")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "node_modules", "@touba"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "..", "..", "..", "sdk", "js"), filepath.Join(dir, "node_modules", "@touba", "sdk")); err != nil {
		t.Fatal(err)
	}
	return &example{t: t, dir: dir, run: t.TempDir()}
}

// start runs the daemon on the example with extra flags.
func (e *example) start(flags ...string) *testkit.Daemon {
	e.t.Helper()
	args := append([]string{"serve", filepath.Join(e.dir, "program.air.json"),
		"--manifest", filepath.Join(e.dir, "touba.manifest.json"),
		"--queue", filepath.Join(e.run, "q.sqlite"), "--state", filepath.Join(e.run, "s.sqlite"),
		"--effect-journal", filepath.Join(e.run, "j.sqlite"), "--admin-socket", filepath.Join(e.run, "admin.sock"),
		"--listen", "127.0.0.1:0", "--metrics-listen", "", "--log-level", "info"}, flags...)
	return testkit.Start(e.t, []string{"STRIPE_WEBHOOK_SECRET=" + webhookSecret, "ORDERS_API_TOKEN=" + ordersToken}, args...)
}

// sign runs the example's recipe, `node sign.mjs FILE`, and returns the
// headers it prints as a curl config (`header = "Name: value"`).
func (e *example) sign(file string, env ...string) http.Header {
	e.t.Helper()
	cmd := exec.Command("node", "sign.mjs", file)
	cmd.Dir = e.dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "STRIPE_WEBHOOK_SECRET=" + webhookSecret}, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		e.t.Fatalf("node sign.mjs %s: %v\n%s", file, err, stderr.String())
	}
	h := http.Header{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), `header = "`)
		if !ok {
			continue
		}
		name, value, _ := strings.Cut(strings.TrimSuffix(line, `"`), ": ")
		h.Set(name, value)
	}
	if h.Get("Stripe-Signature") == "" {
		e.t.Fatalf("sign.mjs printed no Stripe-Signature:\n%s", out)
	}
	return h
}

// reply is the daemon's answer, with the fields of every form of §3.1.
type reply struct {
	status  int
	result  string // status, or error code
	code    string // the code beside status consumed
	queueID string
}

func post(tb testing.TB, url string, body []byte, h http.Header) reply {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, url+triggerPath, bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var a struct {
		QueueID string `json:"queue_id"`
		Status  string `json:"status"`
		Code    string `json:"code"`
		Error   struct {
			Code    string `json:"code"`
			QueueID string `json:"queue_id"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		tb.Fatalf("answer %d is not JSON: %v", resp.StatusCode, err)
	}
	return reply{status: resp.StatusCode, result: a.Status + a.Error.Code, code: a.Code, queueID: a.QueueID + a.Error.QueueID}
}

// send signs file with sign.mjs and posts it.
func (e *example) send(d *testkit.Daemon, file string, env ...string) reply {
	e.t.Helper()
	body, err := os.ReadFile(filepath.Join(e.dir, file))
	if err != nil {
		e.t.Fatal(err)
	}
	return post(e.t, d.URL(), body, e.sign(file, env...))
}

// events are the events the handler booked.
func (e *example) events() []map[string]any { return e.lines("events.jsonl") }

// orders are the payments the orders API recorded.
func (e *example) orders() []map[string]any { return e.lines("orders.jsonl") }

// lines reads the JSON lines of .touba/name in the example's folder.
func (e *example) lines(name string) []map[string]any {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, ".touba", name))
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		e.t.Fatal(err)
	}
	var out []map[string]any
	// Only whole lines: the handler may be writing one as we read.
	lines := strings.Split(string(b), "\n")
	for _, line := range lines[:len(lines)-1] {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			e.t.Fatalf("%s line %q: %v", name, line, err)
		}
		out = append(out, m)
	}
	return out
}

func want(t *testing.T, what string, got reply, status int, result, queueID string) {
	t.Helper()
	if got.status != status || got.result != result || (queueID != "" && got.queueID != queueID) {
		t.Fatalf("%s: answered %d %s (queue %s), want %d %s (queue %s)", what, got.status, got.result, got.queueID,
			status, result, queueID)
	}
}

// cli runs an operator command on the example's daemon and returns its
// standard output.
func (e *example) cli(args ...string) string {
	e.t.Helper()
	out, err := exec.Command(testkit.Binary(e.t), append(args, "--admin-socket", filepath.Join(e.run, "admin.sock"))...).Output()
	if err != nil {
		e.t.Fatalf("touba-trigger %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// byTrigger are the queue's entries, by trigger, read from the files.
func (e *example) byTrigger() map[string][]*touba.Delivery {
	e.t.Helper()
	out := map[string][]*touba.Delivery{}
	for _, d := range testkit.Entries(e.t, filepath.Join(e.run, "q.sqlite")) {
		out[strings.TrimPrefix(d.TriggerRef, "trigger:examples.stripe/")] = append(out[strings.TrimPrefix(d.TriggerRef, "trigger:examples.stripe/")], d)
	}
	return out
}

// TestStripeExample walks the README: with the dispatcher off (--workers 0)
// a new event is enqueued and its endpoint's entry ends done at once, its
// redelivery is consumed and the same id with another body a conflict,
// another type is filtered; each event feeds exactly its route, and
// triggers test shows what a route would compute. With the dispatcher on,
// each event is booked once by its own flow, the invoice's order is marked
// paid with the body CEL computed, and a redelivery runs nothing.
func TestStripeExample(t *testing.T) {
	e := newExample(t)
	d := e.start("--workers", "0")
	first := e.send(d, "event.json")
	want(t, "new event", first, http.StatusAccepted, touba.IntakeEnqueued, "")
	want(t, "redelivery", e.send(d, "event.json"), http.StatusOK, touba.IntakeConsumed, first.queueID)
	want(t, "same id, another body", e.send(d, "event-changed.json"), http.StatusConflict, touba.ETriggerEventPayloadConflict, first.queueID)
	want(t, "signed 10 minutes ago", e.send(d, "event.json", "TIMESTAMP="+stale()), http.StatusUnauthorized, touba.ETriggerSignatureInvalid, "")
	want(t, "another type", e.send(d, "customer-created.json"), http.StatusAccepted, touba.IntakeFiltered, "")
	refund := e.send(d, "refund.json")
	want(t, "a refund", refund, http.StatusAccepted, touba.IntakeEnqueued, "")
	want(t, "a subscription deleted", e.send(d, "subscription-deleted.json"), http.StatusAccepted, touba.IntakeEnqueued, "")
	// Stripe's id is in the body: a body without one is refused, not
	// given a fresh identity (which made one entry per retry).
	if err := os.WriteFile(filepath.Join(e.dir, "not-json.txt"), []byte("not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		want(t, "body not JSON", e.send(d, "not-json.txt"), http.StatusBadRequest, touba.ETriggerEventIDMissing, "")
	}
	// Each event feeds its own route; the endpoint's entries are done.
	got := e.byTrigger()
	for name, n := range map[string]int{"Events": 3, "InvoicePaid": 1, "ChargeRefunded": 1, "SubscriptionDeleted": 1} {
		if len(got[name]) != n {
			t.Fatalf("%d entries of %s, want %d: %v", len(got[name]), name, n, got)
		}
	}
	for _, x := range got["Events"] {
		if x.Status != touba.StatusDone {
			t.Fatalf("endpoint entry %s is %s, want done at once", x.QueueID, x.Status)
		}
	}
	if x := got["InvoicePaid"][0]; x.EventID != "evt_1QExample0001" || x.Status != touba.StatusPending || x.ConcKey != `"cus_QExample0001"` {
		t.Fatalf("InvoicePaid's entry %+v, want the invoice's event, pending, keyed by its customer", x)
	}
	// What the invoice's route would send, without sending it.
	tried := e.cli("triggers", "test", "examples.stripe/InvoicePaid")
	for _, w := range []string{"4 deliveries tried, 1 taken", `step mark-paid (tool:examples.stripe/MarkOrderPaid): input {"amount":20,"currency":"EUR","invoice":"in_1QExample0001","order_id":"A-1001"}`,
		"delivery ", "(filtered at intake)"} {
		if !strings.Contains(tried, w) {
			t.Fatalf("triggers test: want %q in\n%s", w, tried)
		}
	}
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, d.Log())
	}

	d = e.start("--workers", "2")
	testkit.WaitFor(t, 60*time.Second, func() bool { return len(e.events()) == 3 }, "the three events booked")
	// The invoice's second step PUTs the order's payment to the orders API,
	// with the body the program computed, the bearer token from
	// ORDERS_API_TOKEN and the effect id as its key.
	testkit.WaitFor(t, 60*time.Second, func() bool { return len(e.orders()) == 1 }, "the order marked paid")
	invoice := e.byTrigger()["InvoicePaid"][0].QueueID
	if o := e.orders()[0]; o["order_id"] != "A-1001" || o["idempotency_key"] != invoice+":mark-paid" ||
		o["amount"] != float64(20) || o["currency"] != "EUR" || o["invoice"] != "in_1QExample0001" {
		t.Fatalf("orders API recorded %v, want order A-1001 paid 20 EUR under key %s:mark-paid", o, invoice)
	}
	var show string
	testkit.WaitFor(t, 30*time.Second, func() bool {
		show = e.cli("queue", "show", invoice)
		return strings.Contains(show, "status       done")
	}, "the invoice's entry done")
	if !strings.Contains(show, "request PUT http://127.0.0.1:") || !strings.Contains(show, "Authorization: <secret ORDERS_API_TOKEN>") ||
		strings.Contains(show, ordersToken) || !strings.Contains(show, "routed from  "+first.queueID) {
		t.Fatalf("queue show: want the request sent, without the token, routed from %s:\n%s", first.queueID, show)
	}
	if show := e.cli("queue", "show", first.queueID); !strings.Contains(show, "routes (3, fed 1)") ||
		!strings.Contains(show, "trigger:examples.stripe/ChargeRefunded       no   -") {
		t.Fatalf("queue show of the endpoint's entry: want its routes\n%s", show)
	}
	r := e.send(d, "event.json")
	want(t, "redelivery after the run", r, http.StatusOK, touba.IntakeConsumed, first.queueID)
	if r.code != touba.ETriggerReplayRejected {
		t.Fatalf("200 consumed carries code %q, want %s", r.code, touba.ETriggerReplayRejected)
	}
	want(t, "same id, another body, consumed", e.send(d, "event-changed.json"), http.StatusConflict, touba.ETriggerEventPayloadConflict, first.queueID)

	// The delivery log lists the redeliveries with the rejections: status
	// 200, code TriggerReplayRejected, the entry they name.
	var rows []touba.LoggedDelivery
	testkit.WaitFor(t, 30*time.Second, func() bool {
		rows = nil
		out := e.cli("deliveries", "ls", "--rejected", "--code", touba.ETriggerReplayRejected, "--json")
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("deliveries ls --json: %v\n%s", err, out)
		}
		return len(rows) == 2
	}, "the redeliveries in the delivery log")
	if rows[0].StatusCode != http.StatusOK || rows[0].QueueID != first.queueID {
		t.Fatalf("delivery log row %+v, want status 200 naming %s", rows[0], first.queueID)
	}

	d.Signal(syscall.SIGTERM)
	if code := d.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, d.Log())
	}
	if strings.Contains(d.Log(), ordersToken) {
		t.Fatal("the daemon's log holds the orders API token")
	}
	booked := map[string]map[string]any{}
	for _, ev := range e.events() {
		booked[ev["type"].(string)] = ev
	}
	byRef := e.byTrigger()
	if ev := booked["invoice.paid"]; len(booked) != 3 || ev["amount"] != float64(2000) || ev["effect_id"] != invoice+":record" {
		t.Fatalf("events %v, want the three, the invoice's 2000 under effect %s:record", e.events(), invoice)
	}
	if ev := booked["charge.refunded"]; ev["amount"] != float64(500) || ev["effect_id"] != byRef["ChargeRefunded"][0].QueueID+":record" {
		t.Fatalf("refund booked %v, want 500 by ChargeRefunded's entry", ev)
	}
	for name, list := range byRef {
		if len(list) != map[string]int{"Events": 3}[name]+map[bool]int{true: 1}[name != "Events"] {
			t.Fatalf("entries %v after the run", byRef)
		}
		for _, x := range list {
			if x.Status != touba.StatusDone {
				t.Fatalf("entry %s of %s is %s, want done", x.QueueID, name, x.Status)
			}
		}
	}
}

// stale is a Unix time 10 minutes ago, outside the 300 s tolerance.
func stale() string { return strconv.FormatInt(time.Now().Add(-10*time.Minute).Unix(), 10) }
