// Package persistent_test runs the real touba-trigger binary with a
// persistent process handler (SPEC §4.1) on the Go SDK and checks, from
// outside, what SPEC §4 and §5 promise when that one process serves many
// calls at once: SIGKILL of the handler with calls in flight ends them
// unknown, which is retried only under idempotency_key, and the next call
// gets a fresh process.
//
// The handler is testdata/remote, built once by TestMain; its "remote
// side" is a file with one line per request that reached it.
package persistent_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/gobuild"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// remoteBin is the handler program of testdata/remote.
var remoteBin string

func TestMain(m *testing.M) {
	gobuild.Main(m, map[string]*string{"./testdata/remote": &remoteBin})
}

const program = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:persist/Orders", "source": {"kind": "webhook"},
   "steps": [{"id": "write", "tool": "tool:persist/Write", "input": {"order": {"$ref": "/event/body"}}}],
   "retry": {"max_attempts": 3, "initial_interval_ms": 50, "max_interval_ms": 200}}]}`

// world is one test's files, all in its own temp dir.
type world struct {
	t                                  *testing.T
	dir, remote, queue, state, journal string
	acked                              map[string]string // event id -> queue id
}

// newWorld writes the program and a manifest binding the remote handler,
// persistent, with retryMode and maxCalls.
func newWorld(t *testing.T, retryMode string, maxCalls int) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{t: t, dir: dir, remote: filepath.Join(dir, "remote.jsonl"), queue: filepath.Join(dir, "q.sqlite"),
		state: filepath.Join(dir, "s.sqlite"), journal: filepath.Join(dir, "j.sqlite"), acked: map[string]string{}}
	manifest := fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:persist/Write": {"handler": {"kind": "process", "command": %q, "args": [%q],
      "persistent": {"max_in_flight": 8, "max_calls": %d, "idle_timeout_ms": 60000}},
    "grants": [], "timeout_ms": 30000,
    "effect_contract": {"kind": "external_write", "retry_mode": %q}}}}`, remoteBin, w.remote, maxCalls, retryMode)
	for name, content := range map[string]string{"program.air.json": program, "touba.manifest.json": manifest} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// start runs the daemon on w's files with workers.
func (w *world) start(workers int) *testkit.Daemon {
	w.t.Helper()
	return testkit.Start(w.t, nil, "serve", filepath.Join(w.dir, "program.air.json"),
		"--manifest", filepath.Join(w.dir, "touba.manifest.json"), "--queue", w.queue, "--state", w.state,
		"--effect-journal", w.journal, "--listen", "127.0.0.1:0", "--metrics-listen", "",
		"--admin-socket", filepath.Join(w.dir, "admin.sock"), "--log-level", "info", "--workers", fmt.Sprint(workers))
}

// send posts one delivery per event id, each must be answered 202.
func (w *world) send(d *testkit.Daemon, ids ...string) {
	w.t.Helper()
	for _, id := range ids {
		req, err := http.NewRequest(http.MethodPost, d.URL()+"/triggers/persist/Orders",
			strings.NewReader(fmt.Sprintf(`{"order_id":%q}`, id)))
		if err != nil {
			w.t.Fatal(err)
		}
		req.Header.Set("X-Touba-Event-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			w.t.Fatal(err)
		}
		var a struct {
			QueueID string `json:"queue_id"`
		}
		err = json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusAccepted || a.QueueID == "" {
			w.t.Fatalf("post %s: status %d, queue id %q, %v\n%s", id, resp.StatusCode, a.QueueID, err, d.Log())
		}
		w.acked[id] = a.QueueID
	}
}

// stop ends the daemon with SIGTERM; it finishes the runs in flight first.
func stop(tb testing.TB, d *testkit.Daemon) {
	tb.Helper()
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(60 * time.Second); code != 0 {
		tb.Fatalf("exit code %d after SIGTERM, want 0\n%s", code, d.Log())
	}
}

// remoteLine is one request the remote saw (testdata/remote.Line).
type remoteLine struct {
	EffectID string `json:"effect_id"`
	CallID   string `json:"call_id"`
	Attempt  int    `json:"attempt"`
	PID      int    `json:"pid"`
	Mode     string `json:"mode"`
}

// remoteLines reads the remote's file; none yet is no lines.
func (w *world) remoteLines() []remoteLine {
	w.t.Helper()
	data, err := os.ReadFile(w.remote)
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		w.t.Fatal(err)
	}
	var out []remoteLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var l remoteLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			w.t.Fatalf("remote line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// finished counts the runs the daemon logged as done or parked.
func finished(log string) int {
	return strings.Count(log, `"message":"run done"`) + strings.Count(log, `"message":"run parked`)
}

// effects reads the journal by effect id. Only with no daemon running.
func (w *world) effects() map[string]touba.Effect {
	w.t.Helper()
	list, _ := testkit.Effects(w.t, w.journal)
	out := map[string]touba.Effect{}
	for _, e := range list {
		out[e.EffectID] = e
	}
	return out
}

// entries reads the queue by queue id. Only with no daemon running.
func (w *world) entries() map[string]*touba.Delivery {
	w.t.Helper()
	out := map[string]*touba.Delivery{}
	for _, e := range testkit.Entries(w.t, w.queue) {
		out[e.QueueID] = e
	}
	return out
}
