package upgrade_test

import (
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

	"github.com/touba/touba-trigger/internal/testkit"
)

// The program both releases run: one webhook write per order, which the
// remote deduplicates by Idempotency-Key; "park" in the body makes the
// remote answer 500 to a reconcile binding, which parks the entry.
const program = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:up/Orders", "source": {"kind": "webhook"},
   "steps": [{"id": "write", "tool": "tool:up/Write", "input": {"order": {"$ref": "/event/body"}}}]},
  {"ref": "trigger:up/Risky", "source": {"kind": "webhook"},
   "steps": [{"id": "write", "tool": "tool:up/Reconcile", "input": {"order": {"$ref": "/event/body"}}}]}]}`

func manifest(url, secret string) string {
	b := func(path, mode string) string {
		return fmt.Sprintf(`{"handler": {"kind": "webhook", "options": {"url": %q, "timeout_sec": 5},
		  "credentials": {"hmac_secret": {"file": %q}}},
		  "grants": [], "timeout_ms": 5000, "effect_contract": {"kind": "external_write", "retry_mode": %q}}`, url+path, secret, mode)
	}
	return fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {"tool:up/Write": %s, "tool:up/Reconcile": %s}}`,
		b("/write", "idempotency_key"), b("/reconcile", "reconcile"))
}

// remote is the downstream service: it counts the requests of each
// Idempotency-Key, and answers 500 to a body naming "park".
type remote struct {
	srv  *httptest.Server
	mu   sync.Mutex
	keys map[string]int
}

func newRemote(t *testing.T) *remote {
	r := &remote{keys: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if strings.Contains(string(body), `"park"`) {
			http.Error(w, "cannot tell", http.StatusInternalServerError)
			return
		}
		r.mu.Lock()
		r.keys[req.Header.Get("Idempotency-Key")]++
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"written": true}`)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// distinct is how many effects reached the remote.
func (r *remote) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.keys)
}

// files holds the program, the manifest and its secret.
type files struct {
	dir, program, manifest string
}

func newFiles(t *testing.T, r *remote) files {
	t.Helper()
	dir := t.TempDir()
	f := files{dir: dir, program: filepath.Join(dir, "program.air.json"), manifest: filepath.Join(dir, "touba.manifest.json")}
	secret := filepath.Join(dir, "hmac-secret")
	for p, c := range map[string]string{f.program: program, f.manifest: manifest(r.srv.URL, secret), secret: "upgrade-hmac-secret"} {
		if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// start runs bin (either release) with serve's args.
func start(t *testing.T, bin string, args ...string) *testkit.Daemon {
	t.Helper()
	return testkit.StartCmd(t, exec.Command(bin, append([]string{"serve"}, args...)...), nil)
}

// post sends an order to the trigger (Orders or Risky) under eventID and
// returns the status and how long the answer took.
func post(base, trigger, eventID, body string) (int, time.Duration) {
	req, _ := http.NewRequest(http.MethodPost, base+"/triggers/up/"+trigger, strings.NewReader(body))
	req.Header.Set("x-touba-event-id", eventID)
	req.Header.Set("Content-Type", "application/json")
	begin := time.Now()
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, time.Since(begin)
	}
	resp.Body.Close()
	return resp.StatusCode, time.Since(begin)
}

// mustPost posts and fails unless the answer is want.
func mustPost(t *testing.T, base, trigger, eventID, body string, want int) {
	t.Helper()
	if st, took := post(base, trigger, eventID, body); st != want {
		t.Fatalf("post %s to %s: %d after %s, want %d", eventID, base, st, took, want)
	}
}

// stop ends d with SIGTERM and wants exit code 0.
func stop(t *testing.T, d *testkit.Daemon) {
	t.Helper()
	d.Signal(15)
	if code := d.Wait(60 * time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit code %d\n%s", code, d.Log())
	}
}
