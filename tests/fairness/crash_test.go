package fairness_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/internal/testkit"
)

// heldProgram: trigger A's first step is in process, its second calls a
// webhook with max_concurrency 1, so A's runs pass their first step at
// once and meet the full binding at the second: handed back, held.
const heldProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:fair/A", "source": {"kind": "webhook"},
   "steps": [{"id": "note", "tool": "tool:fair/Bill", "input": {"n": {"$ref": "/event/body/n"}}},
             {"id": "call", "tool": "tool:fair/Remote", "input": {"n": {"$ref": "/event/body/n"}}}]}]}`

// keyRemote answers 200 after delay and counts the calls per
// Idempotency-Key (the effect id), as a deduplicating remote would see them.
type keyRemote struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls map[string]int
}

func newKeyRemote(t *testing.T, delay time.Duration) *keyRemote {
	r := &keyRemote{calls: map[string]int{}}
	done := make(chan struct{})
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		select {
		case <-time.After(delay):
		case <-done:
			return
		case <-req.Context().Done():
			return
		}
		r.mu.Lock()
		r.calls[req.Header.Get("Idempotency-Key")]++
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"stored": true}`)
	}))
	t.Cleanup(func() { close(done); r.srv.CloseClientConnections(); r.srv.Close() })
	return r
}

func (r *keyRemote) snapshot() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.calls {
		out[k] = v
	}
	return out
}

// testCrashWhileHeld: the daemon is killed (SIGKILL, at a crash point) just
// after a run was handed back on its full binding, or just after a lease
// took a run handed back; restarted, every entry ends done, and the remote
// saw every effect applied, each key at most twice (only a call in flight
// at the kill may be sent again, under its idempotency key) and the held
// runs exactly once.
func testCrashWhileHeld(t *testing.T, b backend, point string) {
	const n = 20
	r := newKeyRemote(t, 200*time.Millisecond)
	w := newWorld(t, b, heldProgram, stallManifest(r.srv.URL, `"max_concurrency": 1,`))
	w.start()
	w.daemon.Kill() // only to have the files or schema made; restarted armed below
	args := append([]string{"serve", w.program, "--manifest", w.manifest}, w.backend.args(w.dir)...)
	args = append(args, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--admin-socket", w.dir+"/admin.sock")
	if _, ok := b.(*sqliteBackend); ok {
		args = append(args, "--take-over-stale-lock")
	}
	w.daemon = testkit.Start(t, append(hmacEnv, crashpoint.Env+"="+point), args...)
	ids := make([]string, n)
	for i := range n {
		id, err := w.post("fair/A", fmt.Sprintf("a-%d", i), fmt.Sprintf(`{"n": %d}`, i))
		if err != nil {
			if i == 0 {
				t.Fatal(err)
			}
			// The crash point fired while posting: the rest are sent
			// to the restarted daemon.
			ids = ids[:i]
			break
		}
		ids[i] = id
	}
	if code := w.daemon.Wait(30 * time.Second); code != -1 {
		t.Fatalf("daemon exited %d, want killed at %s\n%s", code, point, w.daemon.Log())
	}
	before := r.snapshot()
	w.daemon = testkit.Start(t, hmacEnv, args...)
	for i := len(ids); i < n; i++ {
		// The one whose answer the kill cut may be stored (202
		// duplicate, or 200 consumed once the restart ran it).
		code, id := testkit.Post(t, w.daemon.URL()+"/triggers/fair/A", fmt.Sprintf("a-%d", i), fmt.Sprintf(`{"n": %d}`, i))
		if code != http.StatusAccepted && code != http.StatusOK || id == "" {
			t.Fatalf("a-%d after the restart: %d %s", i, code, id)
		}
		ids = append(ids, id)
	}
	testkit.WaitFor(t, 60*time.Second, func() bool {
		st, err := w.backend.statuses(t.Context(), ids)
		if err != nil {
			return false
		}
		for _, id := range ids {
			if st[id] != "done" {
				return false
			}
		}
		return true
	}, "every entry done after the restart")
	calls := r.snapshot()
	if len(calls) != n {
		t.Fatalf("the remote saw %d effects, want %d: %v", len(calls), n, calls)
	}
	for key, c := range calls {
		if c > 1 && before[key] == 0 {
			t.Fatalf("effect %s reached the remote %d times, none of them before the kill: a held run was repeated", key, c)
		}
		if c > 2 {
			t.Fatalf("effect %s reached the remote %d times", key, c)
		}
	}
	t.Logf("%s at %s: %d calls before the kill, %d effects after, all done", b.name(), point, len(before), len(calls))
}

func TestCrashAfterHeldSQLite(t *testing.T) {
	testCrashWhileHeld(t, newSQLite(t), dispatcher.CrashAfterHeld)
}

func TestCrashAfterHeldLeasedSQLite(t *testing.T) {
	testCrashWhileHeld(t, newSQLite(t), dispatcher.CrashAfterHeldLeased)
}

func TestCrashAfterHeldPostgres(t *testing.T) {
	testCrashWhileHeld(t, newPostgres(t), dispatcher.CrashAfterHeld)
}

func TestCrashAfterHeldLeasedPostgres(t *testing.T) {
	testCrashWhileHeld(t, newPostgres(t), dispatcher.CrashAfterHeldLeased)
}
