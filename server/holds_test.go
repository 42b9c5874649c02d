package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

// Paused triggers across nodes (SPEC §6): the pause is a row of the
// database, so a pause made through one node holds on every node.

// pathRemote counts the requests reaching each path, each taking delay.
// A path with a barrier (meet) holds its calls until that many have
// arrived: with two workers a node, a barrier of 3 is passed only once
// both nodes call it, whichever read the resume first.
type pathRemote struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls map[string]int
	meet  map[string]chan struct{}
	need  map[string]int
}

func newPathRemote(t *testing.T, delay time.Duration) *pathRemote {
	r := &pathRemote{calls: map[string]int{}, meet: map[string]chan struct{}{}, need: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		r.calls[req.URL.Path]++
		meet := r.meet[req.URL.Path]
		if meet != nil && r.calls[req.URL.Path] == r.need[req.URL.Path] {
			close(meet)
		}
		r.mu.Unlock()
		if meet != nil {
			select {
			case <-meet:
			case <-time.After(3 * time.Second): // under the call timeout (4 s): the test then fails on who ran what
			}
		}
		time.Sleep(delay) // keep both nodes' workers busy at once
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"stored": true}`))
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// barrier holds path's calls until n of them have arrived.
func (r *pathRemote) barrier(path string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.meet[path], r.need[path] = make(chan struct{}), n
}

func (r *pathRemote) count(path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[path]
}

// holdFiles writes two triggers, hold/Held and hold/Free, each calling a
// webhook binding of its own on the remote (/held, /free).
func holdFiles(t *testing.T, remote string) (program, manifest string) {
	t.Helper()
	dir := t.TempDir()
	program, manifest = filepath.Join(dir, "program.air.json"), filepath.Join(dir, "touba.manifest.json")
	prog := `{"air_version": "touba-air-v1", "triggers": [
	  {"ref": "trigger:hold/Held", "source": {"kind": "webhook"}, "steps": [{"id": "w", "tool": "tool:hold/HeldWrite", "input": {"n": {"$ref": "/event/body/n"}}}]},
	  {"ref": "trigger:hold/Free", "source": {"kind": "webhook"}, "steps": [{"id": "w", "tool": "tool:hold/FreeWrite", "input": {"n": {"$ref": "/event/body/n"}}}]}]}`
	binding := func(path string) string {
		return fmt.Sprintf(`{"handler": {"kind": "webhook", "options": {"url": %q, "timeout_sec": 4}, "credentials": {"hmac_secret": {"env": "FLOW_HMAC"}}},
		  "timeout_ms": 4000, "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}`, remote+path)
	}
	man := `{"manifest_version": "touba-manifest-v1", "bindings": {"tool:hold/HeldWrite": ` + binding("/held") +
		`, "tool:hold/FreeWrite": ` + binding("/free") + `}}`
	for path, content := range map[string]string{program: prog, manifest: man} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return program, manifest
}

func postHold(t *testing.T, url, name string, n int) {
	t.Helper()
	code, body := testkit.Post(t, url+"/triggers/hold/"+name, fmt.Sprintf("%s-%d", name, n), fmt.Sprintf(`{"n": %d}`, n))
	if code != http.StatusAccepted {
		t.Fatalf("%s %d: %d %s, want 202", name, n, code, body)
	}
}

// callsOf reads a node's handler calls of tool from its /metrics.
func callsOf(t *testing.T, metricsURL, tool string) float64 {
	t.Helper()
	resp, err := http.Get(metricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "touba_handler_calls_total{") && strings.Contains(line, `tool_ref="`+tool+`"`) {
			var v float64
			fmt.Sscanf(line[strings.LastIndex(line, " ")+1:], "%g", &v)
			sum += v
		}
	}
	return sum
}

func metricLine(t *testing.T, metricsURL, prefix string) string {
	t.Helper()
	resp, err := http.Get(metricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

// TestPauseAcrossNodes: hold/Held paused through node 0's admin socket.
// Both nodes accept its deliveries (202) and run none of them while they
// run hold/Free's, accepted after (the lease takes the oldest first, so
// each node passed over the paused entries); the paused entries stay
// pending at attempt 0. Resumed through node 1, both nodes run them, each
// at its first attempt.
func TestPauseAcrossNodes(t *testing.T) {
	r := newPathRemote(t, 30*time.Millisecond)
	program, manifest := holdFiles(t, r.srv.URL)
	dsn := pgtest.New(t)
	t.Setenv("FLOW_HMAC", "hold-test-secret")
	dir, err := os.MkdirTemp("", "th")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var nodes []*testkit.Server
	var apis []*admin.Client
	for i := range 2 {
		sock := filepath.Join(dir, fmt.Sprintf("n%d.sock", i))
		nodes = append(nodes, testkit.StartServer(t, server.Config{Program: program, Manifest: manifest, Database: dsn,
			NodeID: fmt.Sprintf("node-%d", i), Workers: 2, LeaseTTL: 10 * time.Second, MetricsListen: "127.0.0.1:0", AdminSocket: sock}))
		c, err := admin.Dial(sock)
		if err != nil {
			t.Fatal(err)
		}
		apis = append(apis, c)
	}
	ctx := admin.WithOperator(context.Background(), "test")
	if ch, err := apis[0].PauseTrigger(ctx, admin.TriggerRequest{TriggerRef: "hold/Held", Reason: "test"}); err != nil || !ch.Changed {
		t.Fatalf("pause through node 0: %+v %v", ch, err)
	}
	const held, free = 20, 20
	for i := range held {
		postHold(t, nodes[i%2].URL(), "Held", i)
	}
	for i := range free {
		postHold(t, nodes[i%2].URL(), "Free", i)
	}
	testkit.WaitFor(t, 60*time.Second, func() bool {
		return callsOf(t, nodes[0].MetricsURL(), "tool:hold/FreeWrite") > 0 && callsOf(t, nodes[1].MetricsURL(), "tool:hold/FreeWrite") > 0 &&
			r.count("/free") >= free
	}, "both nodes to run the unpaused trigger")
	if got := r.count("/held"); got != 0 {
		t.Fatalf("the remote saw %d calls of the paused trigger", got)
	}
	for i, c := range apis {
		ts, err := c.Triggers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range ts {
			if tr.TriggerRef == "trigger:hold/Held" && (!tr.Paused || tr.Pending != held || tr.Running != 0) {
				t.Fatalf("node %d: %+v, want paused with %d pending", i, tr, held)
			}
		}
		if line := metricLine(t, nodes[i].MetricsURL(), `touba_trigger_paused{node_id="node-`+fmt.Sprint(i)+`",trigger_ref="trigger:hold/Held"}`); !strings.HasSuffix(line, " 1") {
			t.Fatalf("node %d paused gauge: %q", i, line)
		}
	}
	entries, err := apis[1].Entries(ctx, admin.EntryFilter{TriggerRef: "hold/Held", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Status != "pending" || e.Attempts != 0 {
			t.Fatalf("paused entry %s is %s at attempt %d, want pending at 0", e.QueueID, e.Status, e.Attempts)
		}
	}

	// Node 1 rereads the pause at once, node 0 within a second: the
	// barrier holds node 1's first calls until node 0 calls too.
	r.barrier("/held", 3)
	if ch, err := apis[1].ResumeTrigger(ctx, admin.TriggerRequest{TriggerRef: "trigger:hold/Held"}); err != nil || !ch.Changed {
		t.Fatalf("resume through node 1: %+v %v", ch, err)
	}
	testkit.WaitFor(t, 60*time.Second, func() bool { return r.count("/held") >= held }, "the paused trigger's runs after resume")
	testkit.WaitFor(t, 30*time.Second, func() bool {
		es, err := apis[0].Entries(ctx, admin.EntryFilter{TriggerRef: "hold/Held", Status: "done", Limit: 100})
		return err == nil && len(es) == held
	}, "every resumed entry done")
	for i, n := range nodes {
		if c := callsOf(t, n.MetricsURL(), "tool:hold/HeldWrite"); c == 0 {
			t.Fatalf("node %d ran none of the resumed trigger's runs", i)
		}
	}
	entries, _ = apis[0].Entries(ctx, admin.EntryFilter{TriggerRef: "hold/Held", Limit: 100})
	for _, e := range entries {
		if e.Attempts != 1 {
			t.Fatalf("resumed entry %s ran at attempt %d, want 1", e.QueueID, e.Attempts)
		}
	}
}

// TestCircuitIsTheClusters: node 0 opens a binding's circuit after
// min_calls calls that got 503; node 1, started after node 0 stopped,
// reads the open circuit from the database and holds its run (nothing
// reaches the remote) until open_ms passed; then its probe, the remote
// having recovered, closes the circuit and the run is done at attempt 1.
func TestCircuitIsTheClusters(t *testing.T) {
	var mu sync.Mutex
	calls, failing := 0, true
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		mu.Lock()
		calls++
		f := failing
		mu.Unlock()
		if f {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte(`{"stored": true}`))
	}))
	t.Cleanup(remote.Close)
	count := func() int { mu.Lock(); defer mu.Unlock(); return calls }
	dir := t.TempDir()
	program, manifest := filepath.Join(dir, "program.air.json"), filepath.Join(dir, "touba.manifest.json")
	const openMS = 6000
	os.WriteFile(program, []byte(`{"air_version": "touba-air-v1", "triggers": [{"ref": "trigger:hold/Free", "source": {"kind": "webhook"},
	  "steps": [{"id": "w", "tool": "tool:hold/Write", "input": {"n": {"$ref": "/event/body/n"}}}]}]}`), 0o600)
	os.WriteFile(manifest, []byte(fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {"tool:hold/Write": {
	  "handler": {"kind": "webhook", "options": {"url": %q, "timeout_sec": 2}, "credentials": {"hmac_secret": {"env": "FLOW_HMAC"}}},
	  "timeout_ms": 2000, "effect_contract": {"kind": "external_write", "retry_mode": "reconcile"},
	  "circuit": {"failure_ratio": 0.5, "min_calls": 3, "window_ms": 60000, "open_ms": %d}}}}`, remote.URL, openMS)), 0o600)
	t.Setenv("FLOW_HMAC", "hold-test-secret")
	dsn := pgtest.New(t)
	sockDir, err := os.MkdirTemp("", "tc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	start := func(node string) *testkit.Server {
		return testkit.StartServer(t, server.Config{Program: program, Manifest: manifest, Database: dsn, NodeID: node, Workers: 2,
			LeaseTTL: 10 * time.Second, MetricsListen: "127.0.0.1:0", AdminSocket: filepath.Join(sockDir, node+".sock")})
	}
	a := start("node-a")
	var opened time.Time // no later than the circuit opened: before the call that opens it
	for i := range 3 {
		opened = time.Now()
		postHold(t, a.URL(), "Free", i)
		testkit.WaitFor(t, 30*time.Second, func() bool { return count() == i+1 }, fmt.Sprintf("failed call %d", i+1))
	}
	testkit.WaitFor(t, 30*time.Second, func() bool {
		return strings.HasSuffix(metricLine(t, a.MetricsURL(), `touba_circuit_open{node_id="node-a",tool_ref="tool:hold/Write"}`), " 1")
	}, "node a to open the circuit")
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}

	b := start("node-b")
	postHold(t, b.URL(), "Free", 3)
	testkit.WaitFor(t, 30*time.Second, func() bool { return slotWaiting(t, b.MetricsURL()) == 1 }, "node b to hold its run")
	if time.Since(opened) >= openMS*time.Millisecond {
		t.Skipf("node b started after open_ms had passed (a slow machine); nothing to prove")
	}
	if got := count(); got != 3 {
		t.Fatalf("the remote saw %d calls while the cluster's circuit was open, want none after the 3", got-3)
	}
	if line := metricLine(t, b.MetricsURL(), `touba_circuit_open{node_id="node-b",tool_ref="tool:hold/Write"}`); !strings.HasSuffix(line, " 1") {
		t.Fatalf("node b's circuit gauge: %q", line)
	}
	mu.Lock()
	failing = false
	mu.Unlock()
	testkit.WaitFor(t, 30*time.Second, func() bool { return count() == 4 && slotWaiting(t, b.MetricsURL()) == 0 }, "node b's probe")
	testkit.WaitFor(t, 30*time.Second, func() bool {
		return strings.HasSuffix(metricLine(t, b.MetricsURL(), `touba_circuit_open{node_id="node-b",tool_ref="tool:hold/Write"}`), " 0")
	}, "the circuit closed")
	if elapsed := time.Since(opened); elapsed < openMS*time.Millisecond {
		t.Fatalf("node b probed %s after the circuit opened, before open_ms", elapsed)
	}
	c, err := admin.Dial(filepath.Join(sockDir, "node-b.sock"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool {
		es, err := c.Entries(context.Background(), admin.EntryFilter{Status: "done"})
		return err == nil && len(es) == 1
	}, "the held run done")
	es, err := c.Entries(context.Background(), admin.EntryFilter{Status: "done"})
	if err != nil || len(es) != 1 || es[0].Attempts != 1 {
		t.Fatalf("the held run: %+v %v, want done at attempt 1", es, err)
	}
}
