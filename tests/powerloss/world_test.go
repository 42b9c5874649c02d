package powerloss_test

import (
	"context"
	"encoding/json"
	"errors"
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

	"github.com/touba/touba-trigger/internal/testkit"
)

const program = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:power/Orders", "source": {"kind": "webhook"},
   "steps": [{"id": "write", "tool": "tool:power/Write", "input": {"order": {"$ref": "/event/body"}}}],
   "retry": {"max_attempts": 3, "initial_interval_ms": 50, "max_interval_ms": 200}}]}`

// hmacEnv holds the webhook binding's signing secret (the remote does not
// check it).
const hmacEnv = "POWERLOSS_HMAC_SECRET"

// manifestFor binds the step to a webhook at url with retry_mode none, so
// that an effect is never sent twice, whatever happens.
func manifestFor(url string) string {
	return fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:power/Write": {"handler": {"kind": "webhook", "options": {"url": %q, "timeout_sec": 10},
      "credentials": {"hmac_secret": {"env": %q}}},
    "grants": [], "timeout_ms": 15000,
    "effect_contract": {"kind": "external_write", "retry_mode": "none"}}}}`, url, hmacEnv)
}

// remote is the counting remote: requests per effect id, kept in the test
// process, which no power cut touches.
type remote struct {
	srv *httptest.Server
	mu  sync.Mutex
	n   map[string]int
}

func newRemote(t *testing.T) *remote {
	r := &remote{n: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var in struct {
			Context struct {
				Effect struct {
					EffectID string `json:"effect_id"`
				} `json:"effect"`
			} `json:"context"`
		}
		b, _ := io.ReadAll(req.Body)
		if err := json.Unmarshal(b, &in); err != nil || in.Context.Effect.EffectID == "" {
			http.Error(w, "no effect id", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.n[in.Context.Effect.EffectID]++
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"receipt": %q}`, "r-"+in.Context.Effect.EffectID)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// writes returns a copy of the counts.
func (r *remote) writes() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.n))
	for k, v := range r.n {
		out[k] = v
	}
	return out
}

// world is one run: the disk with the daemon's three files (and the
// journal's lock) on the mount, its program and manifest beside, the remote,
// and what the test saw acknowledged.
type world struct {
	t                      *testing.T
	d                      *disk
	remote                 *remote
	dir, program, manifest string
	env                    []string

	mu    sync.Mutex
	acked map[string]string // event id -> queue id of every 202
}

func newWorld(t *testing.T, syncOff bool) *world {
	t.Helper()
	w := &world{t: t, d: newDisk(t), remote: newRemote(t), dir: t.TempDir(), acked: map[string]string{}}
	w.program, w.manifest = filepath.Join(w.dir, "program.air.json"), filepath.Join(w.dir, "touba.manifest.json")
	for p, content := range map[string]string{w.program: program, w.manifest: manifestFor(w.remote.srv.URL)} {
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	w.env = []string{hmacEnv + "=powerloss-test-secret"}
	if syncOff {
		w.env = append(w.env, "TOUBA_TEST_SQLITE_SYNC_OFF=1")
	}
	return w
}

// start runs the daemon on the mount, taking over the lock the last
// (killed) one left.
func (w *world) start() *testkit.Daemon {
	w.t.Helper()
	return testkit.Start(w.t, w.env, "serve", w.program, "--manifest", w.manifest,
		"--queue", w.d.path("q.sqlite"), "--state", w.d.path("s.sqlite"), "--effect-journal", w.d.path("j.sqlite"),
		"--listen", "127.0.0.1:0", "--metrics-listen", "", "--admin-socket", filepath.Join(w.dir, "admin.sock"),
		"--log-level", "info", "--take-over-stale-lock")
}

// intake posts deliveries with fresh event ids from senders goroutines
// until ctx ends, recording every 202 and its queue id. It returns when
// every sender has stopped.
func (w *world) intake(ctx context.Context, d *testkit.Daemon, run, senders int) {
	tr := &http.Transport{MaxIdleConnsPerHost: senders}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	url := d.URL() + "/triggers/power/Orders"
	var wg sync.WaitGroup
	for s := 0; s < senders; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("evt-%d-%d-%d", run, s, i)
				if qid, ok := post(ctx, client, url, id); ok {
					w.mu.Lock()
					w.acked[id] = qid
					w.mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
}

// post sends one delivery; ok is a 202 with its queue id. Errors (the
// daemon killed mid-request) are not acknowledgements, and are expected.
func post(ctx context.Context, client *http.Client, url, eventID string) (string, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url,
		strings.NewReader(fmt.Sprintf(`{"order_id":%q,"amount":42}`, eventID)))
	if err != nil {
		return "", false
	}
	req.Header.Set("X-Touba-Event-Id", eventID)
	resp, err := client.Do(req)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			// The daemon is gone: wait for the cut to end this run
			// rather than spin on refused connections.
			<-ctx.Done()
		}
		return "", false
	}
	defer resp.Body.Close()
	var a struct {
		QueueID string `json:"queue_id"`
	}
	if resp.StatusCode != http.StatusAccepted || json.NewDecoder(resp.Body).Decode(&a) != nil || a.QueueID == "" {
		return "", false
	}
	return a.QueueID, true
}

// ackedCopy returns what was acknowledged so far.
func (w *world) ackedCopy() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]string, len(w.acked))
	for k, v := range w.acked {
		out[k] = v
	}
	return out
}
