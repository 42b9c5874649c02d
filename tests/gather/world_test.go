package gather_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
)

// The triggers of every test: product updates debounced per product, and
// rows batched per account.
const (
	refProducts = "trigger:g/Products"
	refRows     = "trigger:g/Rows"
)

// waitLong bounds every wait on a condition: far above what any takes.
const waitLong = 90 * time.Second

// gathering is how the world's triggers gather.
type gathering struct {
	window, maxWait time.Duration // the products' debounce
	batchSize       int           // the rows' batch
	batchWindow     time.Duration
}

type world struct {
	t                                                   *testing.T
	r                                                   *remote
	dir, program, manifest, queue, state, journal, sock string
	dsn                                                 string // a PostgreSQL database instead of the files (pg_test.go)
	d                                                   *testkit.Daemon
}

// newWorld writes the program (g's gatherings, each step writing the
// gathered deliveries to the remote) and the manifest.
func newWorld(t *testing.T, g gathering) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{t: t, r: newRemote(t), dir: dir, program: filepath.Join(dir, "program.air.json"),
		manifest: filepath.Join(dir, "touba.manifest.json"), queue: filepath.Join(dir, "q.sqlite"),
		state: filepath.Join(dir, "s.sqlite"), journal: filepath.Join(dir, "j.sqlite"), sock: filepath.Join(dir, "admin.sock")}
	input := `{"key": {"$ref": "/event/body/key"}, "last": {"$ref": "/event/body/seq"}, "events": {"$ref": "/events"}}`
	program := fmt.Sprintf(`{"air_version": "touba-air-v1", "triggers": [
	  {"ref": %q, "source": {"kind": "webhook"},
	   "debounce": {"key": {"$ref": "/event/body/key"}, "window_ms": %d, "max_wait_ms": %d},
	   "steps": [{"id": "sync", "tool": "tool:g/Write", "input": %s}],
	   "retry": {"max_attempts": 20, "initial_interval_ms": 20, "max_interval_ms": 200}},
	  {"ref": %q, "source": {"kind": "webhook"},
	   "batch": {"key": {"$ref": "/event/body/key"}, "max_size": %d, "window_ms": %d},
	   "steps": [{"id": "write", "tool": "tool:g/Write", "input": %s}],
	   "retry": {"max_attempts": 20, "initial_interval_ms": 20, "max_interval_ms": 200}}]}`,
		refProducts, g.window.Milliseconds(), g.maxWait.Milliseconds(), input,
		refRows, g.batchSize, g.batchWindow.Milliseconds(), input)
	manifest := fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {"tool:g/Write": {
	  "handler": {"kind": "webhook", "options": {"url": %q, "timeout_sec": 10}, "credentials": {"hmac_secret": {"env": "GATHER_HMAC"}}},
	  "timeout_ms": 20000, "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`, w.r.srv.URL)
	for path, content := range map[string]string{w.program: program, w.manifest: manifest} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// start runs the daemon, with TOUBA_CRASHPOINT=crashpoint when set.
// --take-over-stale-lock: a restart after SIGKILL finds the killed
// daemon's lock record of this host and boot.
func (w *world) start(crashpoint string) *testkit.Daemon {
	w.t.Helper()
	env := []string{"GATHER_HMAC=gather-test-secret"}
	if crashpoint != "" {
		env = append(env, "TOUBA_CRASHPOINT="+crashpoint)
	}
	w.d = testkit.Start(w.t, env, "serve", w.program, "--manifest", w.manifest, "--take-over-stale-lock",
		"--queue", w.queue, "--state", w.state, "--effect-journal", w.journal, "--listen", "127.0.0.1:0",
		"--metrics-listen", "", "--admin-socket", w.sock, "--log-level", "info", "--workers", "8")
	return w.d
}

// stop ends the daemon with SIGTERM, which must exit 0.
func (w *world) stop() {
	w.t.Helper()
	w.d.Signal(syscall.SIGTERM)
	if code := w.d.Wait(30 * time.Second); code != 0 {
		w.t.Fatalf("SIGTERM: exit code %d, want 0\n%s", code, w.d.Log())
	}
}

// answer is intake's answer to one delivery.
type answer struct {
	Status  int
	QueueID string `json:"queue_id"`
	Answer  string `json:"status"`
	Code    string `json:"code"`
	Error   struct {
		Code    string `json:"code"`
		QueueID string `json:"queue_id"`
	} `json:"error"`
}

// send posts one delivery of ref (event id, key, seq, and an optional
// note that changes its body); err is the transport's (a daemon killed
// before it answered).
func (w *world) send(ref, eventID, key string, seq int, note string) (answer, error) {
	return w.sendTo(w.d, ref, eventID, key, seq, note)
}

// sendTo is send to the daemon (node) d.
func (w *world) sendTo(d *testkit.Daemon, ref, eventID, key string, seq int, note string) (answer, error) {
	body := fmt.Sprintf(`{"key": %q, "seq": %d, "note": %q}`, key, seq, note)
	req, err := http.NewRequest(http.MethodPost, d.URL()+"/triggers/"+strings.TrimPrefix(ref, "trigger:"), strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Touba-Event-Id", eventID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	a := answer{Status: resp.StatusCode}
	err = json.NewDecoder(resp.Body).Decode(&a)
	return a, err
}

// post is send that must be accepted (202 enqueued); it returns the
// queue id.
func (w *world) post(ref, eventID, key string, seq int) string {
	w.t.Helper()
	a, err := w.send(ref, eventID, key, seq, "")
	if err != nil || a.Status != http.StatusAccepted || a.Answer != "enqueued" || a.QueueID == "" {
		w.t.Fatalf("post %s %s: %+v, %v; want 202 enqueued", ref, eventID, a, err)
	}
	return a.QueueID
}

// cli runs an operator command against the daemon's socket, or the files
// when none runs, and decodes its --json output into out.
func (w *world) cli(out any, args ...string) {
	w.t.Helper()
	where := []string{"--admin-socket", w.sock, "--queue", w.queue, "--state-file", w.state, "--effect-journal", w.journal}
	if w.dsn != "" {
		where = []string{"--admin-socket", w.sock, "--database", w.dsn} // no node serves it: the CLI reads the database
	}
	cmd := exec.Command(testkit.Binary(w.t), append(append(args, where...), "--json")...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		w.t.Fatalf("touba-trigger %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		w.t.Fatalf("touba-trigger %s: %v\n%s", strings.Join(args, " "), err, stdout.String())
	}
}

// entry is what the tests read of `queue ls` and `queue show --json`.
type entry struct {
	QueueID    string `json:"queue_id"`
	EventID    string `json:"event_id"`
	TriggerRef string `json:"trigger_ref"`
	Status     string `json:"status"`
	MergedInto string `json:"merged_into"`
	Gathering  *struct {
		State  string `json:"state"`
		Size   int    `json:"size"`
		Merged []struct {
			QueueID string `json:"queue_id"`
			EventID string `json:"event_id"`
		} `json:"merged"`
	} `json:"gathering"`
	Next []string `json:"next"`
}

// entries lists every entry of ref, oldest first, by status.
func (w *world) entries(ref string) map[string][]entry {
	w.t.Helper()
	var list []entry
	w.cli(&list, "queue", "ls", "--trigger", ref, "--limit", "1000")
	out := map[string][]entry{}
	for _, e := range list {
		out[e.Status] = append(out[e.Status], e)
	}
	return out
}

func (w *world) show(qid string) entry {
	w.t.Helper()
	var e entry
	w.cli(&e, "queue", "show", qid)
	return e
}

// waitCalls waits until the remote has n distinct calls of key.
func (w *world) waitCalls(key string, n int) []call {
	w.t.Helper()
	var calls []call
	testkit.WaitFor(w.t, waitLong, func() bool { calls = w.r.forKey(key); return len(calls) >= n },
		fmt.Sprintf("%d runs of key %s", n, key))
	return calls
}

// seqs is 1..n.
func seqs(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}
