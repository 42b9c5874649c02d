package isolation_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/natstest"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/sdk/handler"
)

// routedProgram is an endpoint, iso/Events (signed, no steps), with two
// routes: type "w" to a worker's tool, type "n" to a NATS stream.
const routedProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:iso/Events", "source": {"kind": "webhook",
     "verify": {"scheme": "hmac-sha256", "secret": {"env": "` + secretVar + `"}}}, "steps": []},
  {"ref": "trigger:iso/ToWorker", "source": {"kind": "trigger", "trigger": "trigger:iso/Events"},
   "filter": [{"cel": "body.type == 'w'"}], "steps": [{"id": "work", "tool": "tool:iso/Work", "input": {"$ref": "/event/body"}}]},
  {"ref": "trigger:iso/ToNats", "source": {"kind": "trigger", "trigger": "trigger:iso/Events"},
   "filter": [{"pointer": "/body/type", "equals": "n"}], "steps": [{"id": "publish", "tool": "tool:iso/Publish", "input": {"$ref": "/event/body"}}]}]}`

// workerToken is the worker binding's token, in the daemon's environment.
const workerToken = "isolation-worker-token"

func routedManifest(natsURL string) string {
	return fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:iso/Work": {"handler": {"kind": "worker", "token": {"env": "ISO_WORKER_TOKEN"}}, "grants": [], "timeout_ms": 10000,
    "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}},
  "tool:iso/Publish": {"handler": {"kind": "nats", "options": {"url": %q, "subject": "iso.events", "stream": "ISO", "timeout_sec": 5}},
    "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`, natsURL)
}

// TestRoutesWorkersAndBrokersAsTheDaemonsUser: this round's kinds (a
// route with a CEL filter, a worker that connects out, a NATS publish)
// under the shipped unit's privileges: not root (nobody here), no new
// privileges, an empty capability bounding set (setpriv). Each delivery
// reaches its route's destination once.
func TestRoutesWorkersAndBrokersAsTheDaemonsUser(t *testing.T) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv (util-linux) on this host")
	}
	broker := natstest.Start(t)
	broker.Stream("ISO", time.Minute, "iso.>")

	dir, daemonBin := daemonDir(t)
	writeFile(t, filepath.Join(dir, "program.air.json"), routedProgram)
	writeFile(t, filepath.Join(dir, "touba.manifest.json"), routedManifest(broker.URL()))
	cmd := setprivCmd(t, dir, daemonBin)
	secret := "isolation-" + fmt.Sprint(time.Now().UnixNano())
	d := testkit.StartCmd(t, cmd, []string{secretVar + "=" + secret, "ISO_WORKER_TOKEN=" + workerToken})
	if os.Geteuid() == 0 {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.Cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("Uid:\t%d\t%[1]d", nobody); !strings.Contains(string(status), want) {
			t.Fatalf("the daemon does not run as nobody: no %q in\n%s", want, status)
		}
	}

	worked := runWorker(t, d.URL())

	const each = 5
	for i := range each {
		deliverBody(t, d, "Events", fmt.Sprintf("w-%d", i), `{"type":"w"}`, secret)
		deliverBody(t, d, "Events", fmt.Sprintf("n-%d", i), `{"type":"n"}`, secret)
		deliverBody(t, d, "Events", fmt.Sprintf("x-%d", i), `{"type":"x"}`, secret) // no route's
	}
	testkit.WaitFor(t, 60*time.Second, testkit.Every(100*time.Millisecond, func() bool {
		return worked.count() == each && len(broker.Messages("ISO")) == each
	}), fmt.Sprintf("%d calls at the worker and %d messages in the stream", each, each))
	worked.once(t, each)
	onceInStream(t, broker, each)
	if line := warning(d.Log(), "isolat"); line != "" {
		t.Errorf("the daemon warned about isolation: %s", line)
	}
}

// workerCalls counts a worker's calls by effect id.
type workerCalls struct {
	mu sync.Mutex
	by map[string]int
}

func (w *workerCalls) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.by)
}

// once checks that the worker ran n effects, each once.
func (w *workerCalls) once(t *testing.T, n int) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, c := range w.by {
		if c != 1 {
			t.Errorf("the worker ran effect %s %d times, want once", id, c)
		}
	}
	if len(w.by) != n {
		t.Errorf("the worker ran %d effects, want %d", len(w.by), n)
	}
}

// runWorker connects a worker serving tool:iso/Work to the daemon at url
// until the test ends; its calls are applied at once.
func runWorker(t *testing.T, url string) *workerCalls {
	w := &workerCalls{by: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		wk := &handler.Worker{URL: url, Token: workerToken, TakeWait: 5 * time.Second,
			Logf: func(format string, a ...any) { t.Logf("worker: "+format, a...) },
			Tools: []handler.Tool{{Ref: "tool:iso/Work", Run: func(_ context.Context, c *handler.Call) (*handler.Result, error) {
				e := c.Effect()
				w.mu.Lock()
				w.by[e.EffectID]++
				w.mu.Unlock()
				return handler.Output(map[string]bool{"ok": true}).WithReceipt(c.Receipt(handler.Applied, "r:"+e.EffectID)), nil
			}}}}
		done <- wk.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	return w
}

// onceInStream checks that stream ISO holds n effects, each once.
func onceInStream(t *testing.T, broker *natstest.Server, n int) {
	t.Helper()
	seen := map[string]bool{}
	for _, m := range broker.Messages("ISO") {
		id := m.Header.Get("Nats-Msg-Id")
		if seen[id] {
			t.Errorf("effect %s is twice in the stream", id)
		}
		seen[id] = true
	}
	if len(seen) != n {
		t.Errorf("%d effects in the stream, want %d", len(seen), n)
	}
}
