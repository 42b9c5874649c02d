// Package orders_test runs examples/orders end to end: the real daemon
// (internal/testdaemon), the example's program and manifest as shipped, its
// Node.js handlers on sdk/js and its Python handler on sdk/python as real
// child processes, and its orders provider over loopback. It checks a
// delivery through all three steps, the daemon's answers to a redelivery,
// and that a SIGKILL between dispatched and the outcome ends, after a
// restart, with exactly one order at the provider.
package orders_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// Test secrets: long enough that no stored output holds one by chance (the
// daemon refuses to store any text that holds a secret value).
const (
	webhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	apiToken      = "orders-test-token-7b0d3c1e9f"
	triggerPath   = "/triggers/examples.orders/OrderWebhook"
)

// example is one test's copy of examples/orders, its provider, and the
// daemon's files.
type example struct {
	t                     *testing.T
	dir                   string // the copy of examples/orders
	queue, state, journal string
	provider              string // the provider's base URL
}

func moduleRoot(tb testing.TB) string {
	tb.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// newExample copies examples/orders into a temp dir laid out like the
// repository (so the Python handler finds sdk/python where it looks), makes
// node_modules/@touba/sdk the link that `npm install` makes of the
// "file:../../sdk/js" dependency, and starts the provider.
func newExample(t *testing.T) *example {
	t.Helper()
	for _, tool := range []string{"node", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the orders example needs %s: %v", tool, err)
		}
	}
	root := moduleRoot(t)
	base := t.TempDir()
	dir := filepath.Join(base, "examples", "orders")
	copyTree(t, filepath.Join(root, "examples", "orders"), dir)
	slowMachineTimeouts(t, filepath.Join(dir, "touba.manifest.json"))
	if err := os.Symlink(filepath.Join(root, "sdk"), filepath.Join(base, "sdk")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "node_modules", "@touba"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "..", "..", "..", "sdk", "js"), filepath.Join(dir, "node_modules", "@touba", "sdk")); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	e := &example{t: t, dir: dir, queue: filepath.Join(state, "q.sqlite"), state: filepath.Join(state, "s.sqlite"),
		journal: filepath.Join(state, "j.sqlite")}
	e.provider = startProvider(t, dir)
	return e
}

// copyTree copies the regular files under src to dst, leaving out what an
// install or a run leaves behind there.
func copyTree(tb testing.TB, src, dst string) {
	tb.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		switch d.Name() {
		case "node_modules", "__pycache__", "package-lock.json":
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, info.Mode().Perm())
	})
	if err != nil {
		tb.Fatalf("copy %s: %v", src, err)
	}
}

// startProvider runs the example's provider on a free port and returns its
// URL, read from the first line it prints.
func startProvider(tb testing.TB, dir string) string {
	tb.Helper()
	cmd := exec.Command("node", "provider/orders-provider.mjs")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "PORT=0", "ORDERS_API_TOKEN=" + apiToken}
	cmd.Stderr = &testLog{tb: tb, prefix: "provider: "}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
		io.Copy(io.Discard, stdout)
	}()
	select {
	case s := <-line:
		i := strings.Index(s, "http://")
		if i < 0 {
			tb.Fatalf("provider printed %q, not its URL", s)
		}
		return strings.TrimSpace(s[i:])
	case <-time.After(30 * time.Second):
		tb.Fatal("provider did not start within 30s")
		return ""
	}
}

// testLog writes a child's stderr to the test log, for failures.
type testLog struct {
	tb     testing.TB
	prefix string
}

func (l *testLog) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		l.tb.Log(l.prefix + line)
	}
	return len(p), nil
}

// start runs the daemon on the example, with extra environment (a crash
// point) and extra flags.
func (e *example) start(env []string, flags ...string) *testkit.Daemon {
	e.t.Helper()
	env = append([]string{"ORDERS_WEBHOOK_SECRET=" + webhookSecret, "ORDERS_API_URL=" + e.provider,
		"ORDERS_API_TOKEN=" + apiToken}, env...)
	args := append([]string{"serve", filepath.Join(e.dir, "program.air.json"),
		"--manifest", filepath.Join(e.dir, "touba.manifest.json"),
		"--queue", e.queue, "--state", e.state, "--effect-journal", e.journal,
		"--listen", "127.0.0.1:0", "--metrics-listen", "",
		"--admin-socket", filepath.Join(filepath.Dir(e.queue), "admin.sock"), "--log-level", "info"}, flags...)
	return testkit.Start(e.t, env, args...)
}

// stats is the provider's GET /stats.
type stats struct {
	Orders, Shipments struct{ Requests, Performed, Replays int }
}

// get decodes the provider's answer to GET path into v.
func (e *example) get(path string, v any) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.provider+path, nil)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("provider GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		e.t.Fatalf("provider GET %s: %v", path, err)
	}
}

func (e *example) stats() stats {
	var s stats
	e.get("/stats", &s)
	return s
}

type order struct {
	ID, Reference, Status string
}

func (e *example) orders() []order {
	var o struct{ Orders []order }
	e.get("/orders", &o)
	return o.Orders
}

// entry returns the queue entry's status, read from the file once the
// daemon has stopped.
func (e *example) entryStatus(queueID string) string {
	e.t.Helper()
	for _, d := range testkit.Entries(e.t, e.queue) {
		if d.QueueID == queueID {
			return d.Status
		}
	}
	e.t.Fatalf("no queue entry %s", queueID)
	return ""
}

// effect returns one journaled effect, read once the daemon has stopped.
func (e *example) effect(queueID, step string) *touba.Effect {
	e.t.Helper()
	effects, _ := testkit.Effects(e.t, e.journal)
	for i := range effects {
		if effects[i].Scope == queueID && effects[i].EffectID == queueID+":"+step {
			return &effects[i]
		}
	}
	e.t.Fatalf("no effect %s:%s", queueID, step)
	return nil
}

// slowMachineTimeouts raises every binding's timeout_ms in the copied
// manifest to a minute: these tests are about crashes and replays, and a
// Node.js handler that starts slowly on a loaded machine must not time out
// (a timeout is unknown, and idempotency_key would send once more).
func slowMachineTimeouts(tb testing.TB, path string) {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		tb.Fatal(err)
	}
	for _, binding := range m["bindings"].(map[string]any) {
		binding.(map[string]any)["timeout_ms"] = 60000
	}
	if b, err = json.Marshal(m); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		tb.Fatal(err)
	}
}
