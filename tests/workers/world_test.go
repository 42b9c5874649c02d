// Package workers_test runs the real touba-trigger binary with a worker
// binding (SPEC §4.3) and workers that connect out to it: the Go SDK's
// Worker in the test process, or testdata/worker as a process of its own
// that a test can kill; and checks from outside what §4.3 and §5 promise,
// on SQLite and on PostgreSQL, where several nodes share one database
// (SPEC §8) and workers connect to any of them.
package workers_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// workerBin is testdata/worker.
var workerBin string

func TestMain(m *testing.M) {
	gobuild.Main(pgtest.M(m), map[string]*string{"./testdata/worker": &workerBin, "./testdata/benchtool": &benchTool})
}

const (
	token     = "wk-token-7d1f0c"
	postTool  = "tool:wk/Post"
	stubTool  = "tool:wk/Stub"
	orders    = "wk/Orders"
	others    = "wk/Others"
	keyed     = "wk/Keyed"
	otherTool = "tool:wk/Other" // a second worker binding, another token
	chain     = "wk/Chain"      // a stub step, then tool:wk/Post
)

const program = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:wk/Orders", "source": {"kind": "webhook"},
   "steps": [{"id": "post", "tool": "tool:wk/Post", "input": {"order": {"$ref": "/event/body"}}}],
   "retry": {"max_attempts": 5, "initial_interval_ms": 50, "max_interval_ms": 200}},
  {"ref": "trigger:wk/Others", "source": {"kind": "webhook"},
   "steps": [{"id": "bill", "tool": "tool:wk/Stub", "input": {"order": {"$ref": "/event/body"}}}]},
  {"ref": "trigger:wk/Side", "source": {"kind": "webhook"},
   "steps": [{"id": "other", "tool": "tool:wk/Other", "input": {"order": {"$ref": "/event/body"}}}]},
  {"ref": "trigger:wk/Chain", "source": {"kind": "webhook"},
   "steps": [{"id": "bill", "tool": "tool:wk/Stub", "input": {"order": {"$ref": "/event/body"}}},
             {"id": "post", "tool": "tool:wk/Post", "input": {"order": {"$ref": "/event/body"}}}],
   "retry": {"max_attempts": 5, "initial_interval_ms": 50, "max_interval_ms": 200}}]}`

// world is one test's files and daemon.
type world struct {
	t                          *testing.T
	dir, queue, state, journal string
	admin                      string
	d                          *testkit.Daemon
	retryMode                  string
	timeoutMS                  int
	acked                      []string // queue ids, in the order accepted
	ids                        map[string]string
	extraFlags                 []string
	env                        []string // more of the daemon's environment (TOUBA_CRASHPOINT)
	// db is the PostgreSQL database's URL; "" keeps the SQLite files.
	db string
}

// newWorld writes the program and a manifest with tool:wk/Post a worker
// binding under retryMode with timeoutMS; on backend's storage (a fresh
// PostgreSQL database for pgBackend).
func newWorld(t *testing.T, backend, retryMode string, timeoutMS int) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{t: t, dir: dir, queue: filepath.Join(dir, "q.sqlite"), state: filepath.Join(dir, "s.sqlite"),
		journal: filepath.Join(dir, "j.sqlite"), admin: filepath.Join(dir, "admin.sock"), retryMode: retryMode,
		timeoutMS: timeoutMS, ids: map[string]string{}}
	if backend == pgBackend {
		w.db = pgtest.New(t)
	}
	manifest := fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:wk/Post": {"handler": {"kind": "worker", "token": {"env": "WK_TOKEN"}}, "grants": [], "timeout_ms": %d,
    "circuit": null, "effect_contract": {"kind": "external_write", "retry_mode": %q}},
  "tool:wk/Other": {"handler": {"kind": "worker", "token": {"env": "WK_OTHER_TOKEN"}}, "grants": [], "timeout_ms": %d,
    "circuit": null, "effect_contract": {"kind": "none"}},
  "tool:wk/Stub": {"handler": {"kind": "accounting_stub"}, "grants": [], "timeout_ms": %d,
    "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`, timeoutMS, retryMode, timeoutMS, timeoutMS)
	for name, content := range map[string]string{"program.air.json": program, "touba.manifest.json": manifest} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// start runs the daemon on w's files (on the address of the last one, so
// workers find it again after a restart).
func (w *world) start(flags ...string) *testkit.Daemon {
	w.t.Helper()
	listen := "127.0.0.1:0"
	if w.d != nil {
		listen = w.d.Addr
	}
	w.d = w.startOn(listen, w.admin, "n1", flags...)
	return w.d
}

// startOn runs a daemon on w's storage listening on listen, with its
// admin socket at admin; node names it on PostgreSQL.
func (w *world) startOn(listen, admin, node string, flags ...string) *testkit.Daemon {
	w.t.Helper()
	args := append([]string{"serve", filepath.Join(w.dir, "program.air.json"),
		"--manifest", filepath.Join(w.dir, "touba.manifest.json")}, w.storageArgs(node)...)
	args = append(args, "--listen", listen, "--metrics-listen", "127.0.0.1:0",
		"--admin-socket", admin, "--log-level", "info")
	args = append(args, append(w.extraFlags, flags...)...)
	env := append([]string{"WK_TOKEN=" + token, "WK_OTHER_TOKEN=" + token + "-other"}, w.env...)
	return testkit.Start(w.t, env, args...)
}

// send posts one delivery per event id to trigger; each must be 202.
func (w *world) send(trigger string, ids ...string) { w.sendTo(w.d, trigger, ids...) }

// sendTo posts one delivery per event id to trigger at node d; each must
// be 202.
func (w *world) sendTo(d *testkit.Daemon, trigger string, ids ...string) {
	w.t.Helper()
	for _, id := range ids {
		status, qid := testkit.Post(w.t, d.URL()+"/triggers/"+trigger, id, fmt.Sprintf(`{"order_id":%q}`, id))
		if status != http.StatusAccepted {
			w.t.Fatalf("post %s: %d\n%s", id, status, d.Log())
		}
		w.acked = append(w.acked, qid)
		w.ids[id] = qid
	}
}

// cli runs the CLI against the daemon's admin socket and decodes its
// --json output into out.
func (w *world) cli(out any, args ...string) { w.cliAt(w.admin, out, args...) }

// cliAt is cli against the daemon whose admin socket is admin.
func (w *world) cliAt(admin string, out any, args ...string) {
	w.t.Helper()
	cmd := exec.Command(testkit.Binary(w.t), append(args, "--admin-socket", admin, "--json")...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		w.t.Fatalf("touba-trigger %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		w.t.Fatalf("touba-trigger %s: %v\n%s", strings.Join(args, " "), err, stdout.String())
	}
}

// count is how many entries of trigger (all when "") have status.
func (w *world) count(status, trigger string) int {
	w.t.Helper()
	args := []string{"queue", "ls", "--status", status, "--limit", "100000"}
	if trigger != "" {
		args = append(args, "--trigger", "trigger:"+trigger)
	}
	var entries []json.RawMessage
	w.cli(&entries, args...)
	return len(entries)
}

// waitStatus waits until n entries of trigger have status.
func (w *world) waitStatus(status, trigger string, n int, timeout time.Duration) {
	w.t.Helper()
	testkit.WaitForReport(w.t, timeout, testkit.Every(100*time.Millisecond, func() bool { return w.count(status, trigger) >= n }),
		fmt.Sprintf("%d entries of %s %s", n, trigger, status), func() { w.t.Log(w.d.Log()) })
}

// stop ends the daemon with SIGTERM.
func (w *world) stop() {
	w.t.Helper()
	w.d.Signal(syscall.SIGTERM)
	if code := w.d.Wait(60 * time.Second); code != 0 {
		w.t.Fatalf("exit code %d after SIGTERM\n%s", code, w.d.Log())
	}
}

// post sends body to the daemon's path with tok and returns the status
// and body of the answer.
func post(t *testing.T, url, tok, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// take takes up to n calls of tool with tok, waiting up to waitMS.
func take(t *testing.T, d *testkit.Daemon, tok, tool string, n, waitMS int) []map[string]any {
	t.Helper()
	status, body := post(t, d.URL()+"/workers/v1/take", tok, fmt.Sprintf(`{"tools": [%q], "max": %d, "wait_ms": %d}`, tool, n, waitMS))
	if status != http.StatusOK {
		t.Fatalf("take: %d %s", status, body)
	}
	var got struct {
		Calls []map[string]any `json:"calls"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("take answer %s: %v", body, err)
	}
	return got.Calls
}
