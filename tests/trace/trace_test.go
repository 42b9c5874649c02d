// Package trace_test runs the real daemon binary against an in-process
// OTLP/HTTP receiver and checks one delivery's trace (SPEC §7): the
// touba.intake span under the sender's traceparent, the touba.run span of a
// later process (after a restart) as its child and linked to it, the step
// and handler-call spans under the run, the traceparent a process handler
// and an outbound webhook received, and trace_id in the logs. With no
// OTLP endpoint configured nothing is traced and no traceparent is sent.
package trace_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/testkit"
)

// handlerBin is the process handler of testdata/handler, built by TestMain.
var handlerBin string

func TestMain(m *testing.M) {
	gobuild.Main(m, map[string]*string{"./testdata/handler": &handlerBin})
}

// The sender's trace context, as a W3C traceparent.
const (
	senderTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	senderSpan   = "00f067aa0ba902b7"
	senderParent = "00-" + senderTrace + "-" + senderSpan + "-01"
	hmacSecret   = "trace-test-hmac-secret-5d1f0c7a"
)

const program = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:trace/Orders", "source": {"kind": "webhook"},
   "steps": [
     {"id": "proc", "tool": "tool:trace/Proc", "input": {"order": {"$ref": "/event/body"}}},
     {"id": "hook", "tool": "tool:trace/Hook", "input": {"order": {"$ref": "/event/body"}}}]}]}`

func manifest(seenFile, hookURL string) string {
	return fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:trace/Proc": {"handler": {"kind": "process", "command": %q, "args": [%q], "cwd": "."},
    "grants": [], "timeout_ms": 30000, "effect_contract": {"kind": "none"}},
  "tool:trace/Hook": {"handler": {"kind": "webhook", "options": {"url": %q},
      "credentials": {"hmac_secret": {"env": "TRACE_TEST_HMAC"}}},
    "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`, handlerBin, seenFile, hookURL)
}

// setup is one test's files, remote webhook and serve arguments.
type setup struct {
	dir, seenFile string
	hook          *hookServer
	args          []string
}

func newSetup(t *testing.T) *setup {
	t.Helper()
	dir := t.TempDir()
	s := &setup{dir: dir, seenFile: filepath.Join(dir, "seen.txt"), hook: newHookServer(t)}
	prog, man := filepath.Join(dir, "program.air.json"), filepath.Join(dir, "touba.manifest.json")
	if err := os.WriteFile(prog, []byte(program), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(man, []byte(manifest(s.seenFile, s.hook.srv.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	s.args = []string{"serve", prog, "--manifest", man, "--queue", filepath.Join(dir, "q.sqlite"),
		"--state", filepath.Join(dir, "s.sqlite"), "--effect-journal", filepath.Join(dir, "j.sqlite"),
		"--listen", "127.0.0.1:0", "--metrics-listen", "", "--admin-socket", filepath.Join(dir, "admin.sock")}
	return s
}

func (s *setup) start(t *testing.T, env []string, workers int) *testkit.Daemon {
	t.Helper()
	env = append([]string{"TRACE_TEST_HMAC=" + hmacSecret}, env...)
	return testkit.Start(t, env, append(s.args, "--workers", fmt.Sprint(workers))...)
}

// hookServer is the remote service of the webhook binding: it records the
// traceparent header of each request.
type hookServer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string
}

func newHookServer(t *testing.T) *hookServer {
	h := &hookServer{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.seen = append(h.seen, r.Header.Get("Traceparent"))
		h.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"order_id": "o-1"}`)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookServer) traceparents() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.seen...)
}

// post sends one delivery, with traceparent when not empty, and returns its
// queue id.
func post(t *testing.T, d *testkit.Daemon, eventID, traceparent string) string {
	t.Helper()
	header := []string{"Content-Type", "application/json"}
	if traceparent != "" {
		header = append(header, "Traceparent", traceparent)
	}
	status, queueID := testkit.Post(t, d.URL()+"/triggers/trace/Orders", eventID, `{"item":"tea"}`, header...)
	if status != http.StatusAccepted {
		t.Fatalf("post: status %d, queue id %q", status, queueID)
	}
	return queueID
}

// stop sends SIGTERM and checks the daemon exits 0.
func stop(t *testing.T, d *testkit.Daemon) {
	t.Helper()
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d\n%s", code, d.Log())
	}
}

// seenLines reads what the process handler wrote: one traceparent a call.
func seenLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("process handler left no record: %v", err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var s string
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, s)
	}
	return out
}
