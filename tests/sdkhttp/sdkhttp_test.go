// Package sdkhttp_test runs the daemon's real webhook binding (SPEC §2.2)
// against each SDK's HTTP form (§4.2): the Go SDK's HTTPHandler in this
// process, the JS SDK's createHttpHandler and the Python SDK's wsgi_app as
// child processes on 127.0.0.1. Between the daemon and the SDK sits a proxy
// of this test that can lose an answer (so the daemon sends the same request
// again) or change a byte of the body (so the signature no longer matches).
package sdkhttp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/sdk/handler"
	"github.com/touba/touba-trigger/server"
)

const secret = "whsec-sdkhttp-e2e-5b1f0c"

// stats is what a Book server counts: runs of the tool, and bookings it
// made (at most one per effect_id: the tool's own dedupe).
type stats struct {
	Runs    int `json:"runs"`
	Applied int `json:"applied"`
}

// target is one SDK's Book server: the URL of its webhook route and of its
// counters.
type target struct {
	hook, stats string
}

func TestWebhookBindingCallsGoSDK(t *testing.T) {
	runWorld(t, goTarget(t))
}

func TestWebhookBindingCallsJSSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node")
	}
	runWorld(t, childTarget(t, node, "testdata/book_server.mjs"))
}

func TestWebhookBindingCallsPythonSDK(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	runWorld(t, childTarget(t, py, "testdata/book_server.py"))
}

// runWorld starts the daemon with one webhook binding whose URL is a proxy
// to tg, and checks three deliveries: one applied once with its receipt,
// one whose first answer the proxy loses (the daemon's retry carries the
// same Idempotency-Key and body, and the tool's dedupe answers the same
// receipt without booking twice), and one whose body the proxy tampers
// with (refused 401 before the tool runs: not_applied, WebhookRejected).
func runWorld(t *testing.T, tg target) {
	px := newProxy(t, tg.hook)
	dir := t.TempDir()
	program := `{"air_version": "touba-air-v1", "triggers": [{"ref": "trigger:sdkhttp/Invoice", "source": {"kind": "webhook"},
	  "steps": [{"id": "book", "tool": "tool:sdkhttp/Book", "input": {"invoice": {"$ref": "/event/body"}}}],
	  "retry": {"max_attempts": 1}}]}`
	manifest := fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {"tool:sdkhttp/Book": {
	  "handler": {"kind": "webhook", "options": {"url": %q, "timeout_sec": 10}, "credentials": {"hmac_secret": {"env": "SDKHTTP_HMAC"}}},
	  "timeout_ms": 20000, "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`, px.srv.URL)
	files := map[string]string{"program.air.json": program, "touba.manifest.json": manifest}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("SDKHTTP_HMAC", secret)
	journal := filepath.Join(dir, "j.sqlite")
	d := testkit.StartServer(t, server.Config{Program: filepath.Join(dir, "program.air.json"),
		Manifest: filepath.Join(dir, "touba.manifest.json"), Queue: filepath.Join(dir, "q.sqlite"),
		State: filepath.Join(dir, "s.sqlite"), Journal: journal, AdminSocket: filepath.Join(dir, "admin.sock"), Workers: 1})
	send := func(id, body string) string {
		t.Helper()
		status, qid := testkit.Post(t, d.URL()+"/triggers/sdkhttp/Invoice", id, body, "Content-Type", "application/json")
		if status != 202 {
			t.Fatalf("delivery %s: status %d", id, status)
		}
		return qid
	}
	logCount := func(msg string) func() int {
		return func() int { return strings.Count(d.Log(), `"message":"`+msg+`"`) }
	}
	done, failed := logCount("run done"), logCount("run failed")

	// 1. Applied once, with its receipt.
	q1 := send("inv-1", `{"invoice_id": "inv-1", "amount": 10}`)
	testkit.WaitFor(t, 30*time.Second, func() bool { return done() == 1 }, "the first run to be done")
	if got, want := fetchStats(t, tg), (stats{Runs: 1, Applied: 1}); got != want {
		t.Fatalf("after one delivery: %+v, want %+v", got, want)
	}

	// 2. The answer is lost: the daemon sends the same request again.
	px.setMode(modeLoseFirst)
	q2 := send("inv-2", `{"invoice_id": "inv-2", "amount": 20}`)
	testkit.WaitFor(t, 30*time.Second, func() bool { return done() == 2 }, "the second run to be done")
	if got, want := fetchStats(t, tg), (stats{Runs: 3, Applied: 2}); got != want {
		t.Fatalf("after the replayed delivery: %+v, want %+v (two runs of it, one booking)", got, want)
	}
	ex := px.exchanges()
	if len(ex) != 3 {
		t.Fatalf("the proxy saw %d requests, want 3", len(ex))
	}
	first, again := ex[1], ex[2]
	if first.key != q2+":book" || again.key != first.key || !bytes.Equal(again.body, first.body) || again.sig != first.sig {
		t.Fatalf("the retry is not the same request: keys %q %q, same body %v", first.key, again.key, bytes.Equal(again.body, first.body))
	}
	if first.status != 200 || again.status != 200 {
		t.Fatalf("the SDK answered %d then %d, want 200 twice", first.status, again.status)
	}
	r1, r2 := receiptOf(t, first.answer), receiptOf(t, again.answer)
	if r1 != r2 || r1.Outcome != "applied" || r1.ReceiptRef != "booking:2" {
		t.Fatalf("receipts %+v then %+v, want the same applied booking:2", r1, r2)
	}

	// 3. A tampered body: 401, the tool never runs.
	px.setMode(modeTamper)
	q3 := send("inv-3", `{"invoice_id": "inv-3", "amount": 30, "note": "tamper-me"}`)
	testkit.WaitFor(t, 30*time.Second, func() bool { return failed() == 1 }, "the tampered run to fail")
	if got, want := fetchStats(t, tg), (stats{Runs: 3, Applied: 2}); got != want {
		t.Fatalf("after the tampered delivery: %+v, want %+v (no run)", got, want)
	}
	if ex := px.exchanges(); len(ex) != 4 || ex[3].status != http.StatusUnauthorized {
		t.Fatalf("the tampered request: %d requests, last answered %d, want 401", len(ex), ex[len(ex)-1].status)
	}

	if err := d.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	// The receiver's own reason reaches the operator (issue 37): the
	// SDK's 401 names SignatureInvalid.
	if code, msg := testkit.EntryError(t, filepath.Join(dir, "q.sqlite"), q3); code != touba.EWebhookRejected ||
		!strings.Contains(msg, "401 Unauthorized: SignatureInvalid: ") {
		t.Errorf("the tampered entry: %s %q, want WebhookRejected naming the receiver's SignatureInvalid", code, msg)
	}
	effects, _ := testkit.Effects(t, journal)
	byID := map[string]touba.Effect{}
	for _, e := range effects {
		byID[e.EffectID] = e
	}
	for _, want := range []struct {
		qid, state, ref, code string
	}{
		{q1, "applied", "booking:1", ""},
		{q2, "applied", "booking:2", ""},
		{q3, "not_applied", "", "WebhookRejected"},
	} {
		e, ok := byID[want.qid+":book"]
		if !ok {
			t.Fatalf("no effect %s:book in the journal: %+v", want.qid, effects)
		}
		if e.State != want.state || e.ReceiptRef != want.ref || e.ErrorCode != want.code || e.ReceiptErrorCode != "" {
			t.Fatalf("effect %s: state %s ref %q code %q receipt error %q, want %s %q %q", e.EffectID, e.State,
				e.ReceiptRef, e.ErrorCode, e.ReceiptErrorCode, want.state, want.ref, want.code)
		}
		if want.state == "applied" {
			var out struct {
				IdempotencyKey string `json:"idempotency_key"`
			}
			if err := json.Unmarshal(e.Result, &out); err != nil || out.IdempotencyKey != e.EffectID {
				t.Fatalf("effect %s: the tool saw Idempotency-Key %q (%v), want the effect id; result %s",
					e.EffectID, out.IdempotencyKey, err, e.Result)
			}
		}
	}
}

type receipt struct {
	EffectID    string `json:"effect_id"`
	Fingerprint string `json:"fingerprint"`
	Outcome     string `json:"outcome"`
	ReceiptRef  string `json:"receipt_ref"`
}

func receiptOf(t *testing.T, answer []byte) receipt {
	t.Helper()
	var resp struct {
		OK            bool     `json:"ok"`
		EffectReceipt *receipt `json:"effect_receipt"`
	}
	if err := json.Unmarshal(answer, &resp); err != nil || !resp.OK || resp.EffectReceipt == nil {
		t.Fatalf("answer %s is not an ok protocol response with a receipt (%v)", answer, err)
	}
	return *resp.EffectReceipt
}

func fetchStats(t *testing.T, tg target) stats {
	t.Helper()
	resp, err := http.Get(tg.stats)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s stats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// goTarget serves the Go SDK's Book in this process.
func goTarget(t *testing.T) target {
	var mu sync.Mutex
	var st stats
	booked := map[string]int{}
	tool := handler.Tool{Ref: "tool:sdkhttp/Book", Run: func(_ context.Context, c *handler.Call) (*handler.Result, error) {
		var in struct {
			Invoice json.RawMessage `json:"invoice"`
		}
		if err := c.Decode(&in); err != nil {
			return nil, handler.Errorf("BadInput", "%v", err)
		}
		id := c.Effect().EffectID
		mu.Lock()
		st.Runs++
		n, ok := booked[id]
		if !ok {
			n = len(booked) + 1
			booked[id] = n
			st.Applied++
		}
		mu.Unlock()
		out := map[string]any{"booking": n, "invoice": in.Invoice, "idempotency_key": c.Context.IdempotencyKey, "sdk": "go"}
		return handler.Output(out).WithReceipt(c.Receipt(handler.Applied, fmt.Sprintf("booking:%d", n))), nil
	}}
	mux := http.NewServeMux()
	mux.Handle("/hook", handler.HTTPHandler(tool, handler.WithSecret(secret)))
	mux.HandleFunc("/stats", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		json.NewEncoder(w).Encode(st)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return target{hook: srv.URL + "/hook", stats: srv.URL + "/stats"}
}

// childTarget starts an SDK's Book server as a child process, with the
// secret in TOUBA_WEBHOOK_SECRET, and reads the port it prints.
func childTarget(t *testing.T, command, script string) target {
	cmd := exec.Command(command, script)
	cmd.Env = append(os.Environ(), handler.SecretEnv+"="+secret)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s stderr:\n%s", script, stderr.String())
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, out)
	}()
	var first string
	select {
	case first = <-lines:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s printed no port within 30s\n%s", script, stderr.String())
	}
	var hello struct {
		Port int `json:"port"`
	}
	if err := json.Unmarshal([]byte(first), &hello); err != nil || hello.Port == 0 {
		t.Fatalf("%s: first line %q is not {\"port\": N}\n%s", script, first, stderr.String())
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", hello.Port)
	return target{hook: base + "/hook", stats: base + "/stats"}
}
