package server_test

import (
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

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

// Flow control across nodes (SPEC §2.1 concurrency, §2.2 max_concurrency):
// several daemons on one PostgreSQL database, calling one webhook remote
// that records what reaches it.

// flowRemote is the webhook a binding calls. It records, per concurrency
// key, the order in which deliveries first reach it (deduplicated by
// Idempotency-Key) and counts calls in flight, overall and per key. A call
// waits delay, or, while block is set, until released or its caller is
// gone.
type flowRemote struct {
	srv   *httptest.Server
	delay time.Duration

	mu          sync.Mutex
	seen        map[string]bool
	order       map[string][]int
	seqs        []int // every call's seq, in arrival order
	calls       int
	inFlight    int
	maxInFlight int
	perKey      map[string]int
	keyOverlap  string
	block       chan struct{} // non-nil: calls wait for it to close
}

func newFlowRemote(t *testing.T, delay time.Duration) *flowRemote {
	r := &flowRemote{delay: delay, seen: map[string]bool{}, order: map[string][]int{}, perKey: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *flowRemote) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var c struct {
		Input struct {
			Customer string `json:"customer"`
			Seq      int    `json:"seq"`
		} `json:"input"`
	}
	json.Unmarshal(body, &c)
	key := c.Input.Customer
	r.mu.Lock()
	if idem := req.Header.Get("Idempotency-Key"); !r.seen[idem] {
		r.seen[idem] = true
		r.order[key] = append(r.order[key], c.Input.Seq)
		r.calls++
	}
	r.seqs = append(r.seqs, c.Input.Seq)
	r.inFlight++
	r.maxInFlight = max(r.maxInFlight, r.inFlight)
	r.perKey[key]++
	if r.perKey[key] > 1 && r.keyOverlap == "" {
		r.keyOverlap = key
	}
	block := r.block
	r.mu.Unlock()

	if block != nil {
		select {
		case <-block:
		case <-req.Context().Done(): // the caller died
		}
	} else {
		time.Sleep(r.delay) // keep calls overlapping, so the bounds have something to prove
	}

	r.mu.Lock()
	r.inFlight--
	r.perKey[key]--
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"stored": true}`))
}

func (r *flowRemote) snapshot() (calls, inFlight, most int, overlap string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls, r.inFlight, r.maxInFlight, r.keyOverlap
}

func (r *flowRemote) waitCalls(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	testkit.WaitFor(t, timeout, func() bool { c, _, _, _ := r.snapshot(); return c >= n }, fmt.Sprintf("%d deliveries at the remote", n))
}

// flowFiles writes a program whose trigger has concurrency max 1 on the
// body's customer (when keyed), its one step bound to the remote with
// max_concurrency (0: none).
func flowFiles(t *testing.T, remoteURL string, keyed bool, maxConcurrency int) (program, manifest string) {
	t.Helper()
	dir := t.TempDir()
	program, manifest = filepath.Join(dir, "program.air.json"), filepath.Join(dir, "touba.manifest.json")
	conc := ""
	if keyed {
		conc = `"concurrency": {"key": {"$ref": "/event/body/customer"}, "max": 1},`
	}
	prog := `{"air_version": "touba-air-v1", "triggers": [{"ref": "trigger:flow/Orders", "source": {"kind": "webhook"}, ` + conc + `
	  "steps": [{"id": "write", "tool": "tool:flow/Write",
	             "input": {"customer": {"$ref": "/event/body/customer"}, "seq": {"$ref": "/event/body/seq"}}}],
	  "retry": {"max_attempts": 20, "initial_interval_ms": 20, "max_interval_ms": 200}}]}`
	limit := ""
	if maxConcurrency > 0 {
		limit = fmt.Sprintf(`"max_concurrency": %d,`, maxConcurrency)
	}
	man := fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {"tool:flow/Write": {
	  "handler": {"kind": "webhook", "options": {"url": %q, "timeout_sec": 2}, "credentials": {"hmac_secret": {"env": "FLOW_HMAC"}}},
	  %s "timeout_ms": 2000, "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`, remoteURL, limit)
	for path, content := range map[string]string{program: prog, manifest: man} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return program, manifest
}

// flowNodes runs n daemons in process on dsn, workers each.
func flowNodes(t *testing.T, dsn, program, manifest string, n, workers int) []*testkit.Server {
	t.Helper()
	t.Setenv("FLOW_HMAC", "flow-test-secret")
	var out []*testkit.Server
	for i := range n {
		out = append(out, testkit.StartServer(t, server.Config{Program: program, Manifest: manifest, Database: dsn,
			NodeID: fmt.Sprintf("node-%d", i), Workers: workers, LeaseTTL: 10 * time.Second, MetricsListen: "127.0.0.1:0"}))
	}
	return out
}

func postFlow(t *testing.T, url, customer string, seq int) {
	t.Helper()
	code, body := testkit.Post(t, url+"/triggers/flow/Orders", fmt.Sprintf("%s-%d", customer, seq),
		fmt.Sprintf(`{"customer": %q, "seq": %d}`, customer, seq))
	if code != http.StatusAccepted {
		t.Errorf("%s seq %d: %d %s", customer, seq, code, body)
	}
}

// TestKeyOrderingAcrossNodes: 10 keys x 10 deliveries, each key's posted
// one after the other to the three nodes in turn, all keys at once. Each
// key's deliveries reach the remote in acceptance order and never two at
// once, whichever node accepted them and whichever runs them, while
// several keys are in flight together.
func TestKeyOrderingAcrossNodes(t *testing.T) {
	r := newFlowRemote(t, 5*time.Millisecond)
	program, manifest := flowFiles(t, r.srv.URL, true, 0)
	nodes := flowNodes(t, pgtest.New(t), program, manifest, 3, 8)
	const nKeys, perKey = 10, 10
	var wg sync.WaitGroup
	for k := range nKeys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perKey {
				postFlow(t, nodes[(k+i)%len(nodes)].URL(), fmt.Sprintf("cust-%02d", k), i)
			}
		}()
	}
	wg.Wait()
	r.waitCalls(t, nKeys*perKey, 120*time.Second)
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range nKeys {
		key := fmt.Sprintf("cust-%02d", k)
		got := r.order[key]
		for i, s := range got {
			if s != i {
				t.Fatalf("key %s: deliveries reached the remote in order %v, want 0..%d", key, got, perKey-1)
			}
		}
	}
	if r.keyOverlap != "" {
		t.Fatalf("key %s had two calls in flight at once", r.keyOverlap)
	}
	if r.maxInFlight < 3 {
		t.Fatalf("at most %d calls in flight at once: keys were serialised", r.maxInFlight)
	}
	t.Logf("most calls in flight at once: %d", r.maxInFlight)
}

// TestMaxConcurrencyAcrossNodes: max_concurrency 2 on three nodes of four
// workers each: the remote never sees a third call in flight, and sees
// two.
func TestMaxConcurrencyAcrossNodes(t *testing.T) {
	r := newFlowRemote(t, 20*time.Millisecond)
	program, manifest := flowFiles(t, r.srv.URL, false, 2)
	nodes := flowNodes(t, pgtest.New(t), program, manifest, 3, 4)
	const n = 30
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); postFlow(t, nodes[i%len(nodes)].URL(), fmt.Sprintf("c%d", i), i) }()
	}
	wg.Wait()
	r.waitCalls(t, n, 120*time.Second)
	if _, _, most, _ := r.snapshot(); most != 2 {
		t.Fatalf("at most %d calls in flight at once, want exactly 2 (max_concurrency 2 across the nodes)", most)
	}
}

// TestSlotOfKilledNodeFrees: a node killed with -9 while its call holds
// the binding's only slot keeps it no longer than its lease: another node
// waits for the slot while the lease lives (no call of its own reaches the
// remote), then takes it and calls.
func TestSlotOfKilledNodeFrees(t *testing.T) {
	r := newFlowRemote(t, 0)
	r.block = make(chan struct{})
	program, manifest := flowFiles(t, r.srv.URL, false, 1)
	dsn := pgtest.New(t)
	// The daemon as a child of its own, to kill; built here, as this
	// package's TestMain is pgtest's, not gobuild's.
	bin := filepath.Join(t.TempDir(), "touba-trigger")
	if err := gobuild.Build("..", "./cmd/touba-trigger", bin); err != nil {
		t.Fatal(err)
	}
	a := testkit.StartCmd(t, exec.Command(bin, "serve", program, "--manifest", manifest,
		"--database", dsn, "--node-id", "node-a", "--lease-ttl", "8s", "--workers", "1", "--listen", "127.0.0.1:0",
		"--metrics-listen", "", "--admin-socket", "", "--log-level", "info"), []string{"FLOW_HMAC=flow-test-secret"})
	postFlow(t, a.URL(), "c", 0)
	testkit.WaitFor(t, 30*time.Second, func() bool { _, in, _, _ := r.snapshot(); return in == 1 }, "node a's call in flight")
	a.Kill()
	killed := time.Now()
	testkit.WaitFor(t, 10*time.Second, func() bool { _, in, _, _ := r.snapshot(); return in == 0 }, "node a's call to end with it")
	close(r.block) // calls answer at once from now on

	b := flowNodes(t, dsn, program, manifest, 1, 2)[0]
	postFlow(t, b.URL(), "c", 1)
	testkit.WaitFor(t, 10*time.Second, func() bool { return slotWaiting(t, b.MetricsURL()) > 0 }, "node b to wait for the slot")
	if calls, _, _, _ := r.snapshot(); calls != 1 {
		t.Fatalf("the remote saw %d deliveries while the killed node's lease held the slot, want 1", calls)
	}
	r.waitCalls(t, 2, 30*time.Second)
	r.mu.Lock()
	first := r.seqs[1]
	r.mu.Unlock()
	t.Logf("node b's first call (seq %d) %s after the kill (lease ttl 8s)", first, time.Since(killed).Round(100*time.Millisecond))
}

// slotWaiting reads from /metrics the runs a binding holds back, for want
// of a slot or behind its open circuit: handed back, or never leased
// (SPEC §2.2 "Holds take nothing").
func slotWaiting(t *testing.T, url string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "touba_trigger_held_entries{") &&
			(strings.Contains(line, `reason="slot"`) || strings.Contains(line, `reason="circuit"`)) {
			var v float64
			fmt.Sscanf(line[strings.LastIndex(line, " ")+1:], "%g", &v)
			sum += v
		}
	}
	return sum
}
