// Package flow_test runs the real touba-trigger binary against a webhook
// remote in the test process and checks, from outside, the flow control of
// SPEC §2.1 and §2.2: per-key ordering (concurrency max 1) through normal
// running, a SIGKILL mid-run and a parked entry settled by an operator, and
// a binding's max_concurrency.
package flow_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
)

type world struct {
	t                                             *testing.T
	dir, program, manifest, queue, state, journal string
	sock                                          string
}

// newWorld writes a program whose trigger has concurrency (when keyed) and
// a manifest binding its one step to the remote with retryMode and
// maxConcurrency (0: none).
func newWorld(t *testing.T, r *remote, keyed bool, retryMode string, maxConcurrency int) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{t: t, dir: dir, program: filepath.Join(dir, "program.air.json"), manifest: filepath.Join(dir, "touba.manifest.json"),
		queue: filepath.Join(dir, "q.sqlite"), state: filepath.Join(dir, "s.sqlite"), journal: filepath.Join(dir, "j.sqlite"),
		sock: filepath.Join(dir, "admin.sock")}
	conc := ""
	if keyed {
		conc = `"concurrency": {"key": {"$ref": "/event/body/customer"}, "max": 1},`
	}
	program := `{"air_version": "touba-air-v1", "triggers": [{"ref": "trigger:flow/Orders", "source": {"kind": "webhook"}, ` + conc + `
	  "steps": [{"id": "write", "tool": "tool:flow/Write",
	             "input": {"customer": {"$ref": "/event/body/customer"}, "seq": {"$ref": "/event/body/seq"}}}],
	  "retry": {"max_attempts": 20, "initial_interval_ms": 20, "max_interval_ms": 200}}]}`
	limit := ""
	if maxConcurrency > 0 {
		limit = fmt.Sprintf(`"max_concurrency": %d,`, maxConcurrency)
	}
	manifest := fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {"tool:flow/Write": {
	  "handler": {"kind": "webhook", "options": {"url": %q, "timeout_sec": 10}, "credentials": {"hmac_secret": {"env": "FLOW_HMAC"}}},
	  %s "timeout_ms": 20000, "effect_contract": {"kind": "external_write", "retry_mode": %q}}}}`, r.srv.URL, limit, retryMode)
	for path, content := range map[string]string{w.program: program, w.manifest: manifest} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func (w *world) start(workers int) *testkit.Daemon {
	w.t.Helper()
	// --take-over-stale-lock: the SIGKILL test restarts on a lock left by
	// the killed daemon of this host and boot.
	return testkit.Start(w.t, []string{"FLOW_HMAC=flow-test-secret"}, "serve", w.program, "--manifest", w.manifest,
		"--take-over-stale-lock",
		"--queue", w.queue, "--state", w.state, "--effect-journal", w.journal, "--listen", "127.0.0.1:0",
		"--metrics-listen", "", "--admin-socket", w.sock, "--log-level", "info", "--workers", fmt.Sprint(workers))
}

// cli runs the CLI against the daemon's admin socket and decodes --json.
func (w *world) cli(out any, args ...string) {
	w.t.Helper()
	cmd := exec.Command(testkit.Binary(w.t), append(args, "--admin-socket", w.sock, "--json")...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		w.t.Fatalf("touba-trigger %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if out != nil {
		if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
			w.t.Fatalf("touba-trigger %s: %v\n%s", strings.Join(args, " "), err, stdout.String())
		}
	}
}

// postAll sends perKey deliveries for each key: one goroutine per key
// posting its deliveries one after the other (so acceptance order per key
// is seq order), all keys at once.
func postAll(t *testing.T, url string, keys []string, perKey int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(keys))
	for _, k := range keys {
		wg.Add(1)
		go func(k string) {
			defer wg.Done()
			for i := 0; i < perKey; i++ {
				body := fmt.Sprintf(`{"customer": %q, "seq": %d}`, k, i)
				req, _ := http.NewRequest("POST", url+"/triggers/flow/Orders", strings.NewReader(body))
				req.Header.Set("X-Touba-Event-Id", fmt.Sprintf("%s-%d", k, i))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					errs <- err
					return
				}
				resp.Body.Close()
				if resp.StatusCode != 202 {
					errs <- fmt.Errorf("%s seq %d: status %d", k, i, resp.StatusCode)
					return
				}
			}
		}(k)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("cust-%02d", i)
	}
	return out
}

// TestKeyOrderingEndToEnd: 20 keys x 20 deliveries posted concurrently;
// each key's deliveries reach the remote in acceptance order, never two of
// one key at once, while several keys are in flight together.
func TestKeyOrderingEndToEnd(t *testing.T) {
	r := newRemote(t, 5*time.Millisecond)
	w := newWorld(t, r, true, "idempotency_key", 0)
	d := w.start(16)
	ks := keys(20)
	postAll(t, d.URL(), ks, 20)
	r.waitCalls(t, 400, 120*time.Second)
	r.checkOrder(t, ks, 20)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keyOverlap != "" {
		t.Fatalf("key %s had two calls in flight at once", r.keyOverlap)
	}
	if r.maxInFlight < 4 {
		t.Fatalf("at most %d calls in flight at once: keys were serialised", r.maxInFlight)
	}
	t.Logf("most calls in flight at once: %d", r.maxInFlight)
}

// TestKeyOrderingSurvivesSIGKILL: the daemon is killed with -9 mid-run and
// started again on the same files; each key's order still holds.
func TestKeyOrderingSurvivesSIGKILL(t *testing.T) {
	r := newRemote(t, 5*time.Millisecond)
	w := newWorld(t, r, true, "idempotency_key", 0)
	d := w.start(16)
	ks := keys(20)
	postAll(t, d.URL(), ks, 20)
	r.waitCalls(t, 120, 120*time.Second)
	d.Kill()
	r.mu.Lock()
	before := r.calls
	r.mu.Unlock()
	if before >= 400 {
		t.Fatalf("every delivery ran before the kill: the kill proved nothing")
	}
	w.start(16)
	r.waitCalls(t, 400, 120*time.Second)
	r.checkOrder(t, ks, 20)
}

type entry struct {
	QueueID        string `json:"queue_id"`
	EventID        string `json:"event_id"`
	Status         string `json:"status"`
	ConcurrencyKey string `json:"concurrency_key"`
	Held           bool   `json:"held"`
}

// TestParkedEntryHoldsItsKey: a write whose outcome is unknown under
// reconcile parks its entry; the later entries of its key wait (held, as
// queue ls --held shows) while other keys finish, and go in order once an
// operator resolves the effect.
func TestParkedEntryHoldsItsKey(t *testing.T) {
	r := newRemote(t, time.Millisecond)
	w := newWorld(t, r, true, "reconcile", 0)
	d := w.start(8)
	ks := keys(5)
	// The remote breaks on cust-02's second delivery.
	mend := r.breakOn("cust-02", 1)
	postAll(t, d.URL(), ks, 5)
	// Everything but cust-02's last three: 4 keys x 5 + cust-02 seq 0, 1.
	r.waitCalls(t, 22, 60*time.Second)
	var parked []entry
	testkit.WaitFor(t, 30*time.Second, func() bool {
		w.cli(&parked, "queue", "ls", "--status", "parked")
		return len(parked) > 0
	}, "a parked entry")
	if parked[0].EventID != "cust-02-1" {
		t.Fatalf("parked %+v, want cust-02-1", parked[0])
	}
	var held []entry
	// --oldest-first: in the order they will run once the key is free
	// (listings are newest first by default).
	w.cli(&held, "queue", "ls", "--held", "--oldest-first")
	if len(held) != 3 || held[0].EventID != "cust-02-2" || held[2].EventID != "cust-02-4" || held[0].ConcurrencyKey != `"cust-02"` {
		t.Fatalf("held entries %+v, want cust-02-2..4", held)
	}
	r.mu.Lock()
	if got := r.order["cust-02"]; len(got) != 2 {
		r.mu.Unlock()
		t.Fatalf("cust-02 reached the remote as %v while its entry 1 was parked", got)
	}
	r.mu.Unlock()
	mend()
	q := parked[0].QueueID
	w.cli(nil, "effects", "resolve", q, q+":write", "--applied", "--receipt-ref", "op-1")
	r.waitCalls(t, 25, 60*time.Second)
	r.checkOrder(t, ks, 5)
}

// TestMaxConcurrency: a binding with max_concurrency 2 never has a third
// call in flight, however many workers are free.
func TestMaxConcurrency(t *testing.T) {
	r := newRemote(t, 30*time.Millisecond)
	w := newWorld(t, r, false, "idempotency_key", 2)
	d := w.start(8)
	ks := keys(24)
	postAll(t, d.URL(), ks, 1)
	r.waitCalls(t, 24, 60*time.Second)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.maxInFlight != 2 {
		t.Fatalf("most calls in flight at once: %d, want 2", r.maxInFlight)
	}
}
