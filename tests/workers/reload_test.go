package workers_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// TestReloadWithCallsInEachState: a reload (SIGHUP, the worker binding's
// timeout changed) while calls are in each state a worker call has:
// answered, handed out to a worker and waiting for one. The handed-out
// calls' answers after the reload are taken (200), the waiting ones are
// handed out after it, each call once, and every delivery ends done.
func TestReloadWithCallsInEachState(t *testing.T) { eachBackend(t, tReloadWithCallsInEachState) }

func tReloadWithCallsInEachState(t *testing.T, backend string) {
	w := newWorld(t, backend, touba.RetryIdempotencyKey, 20000)
	w.start("--workers", "8")
	var ids []string
	for i := range 7 {
		ids = append(ids, fmt.Sprintf("rl-%d", i))
	}
	w.send(orders, ids...)

	handed := map[string]bool{} // call ids
	takeN := func(n int) []map[string]any {
		var got []map[string]any
		testkit.WaitFor(t, 30*time.Second, func() bool {
			got = append(got, take(t, w.d, token, postTool, n-len(got), 1000)...)
			return len(got) >= n
		}, fmt.Sprintf("%d calls handed out", n))
		for _, c := range got {
			id := c["context"].(map[string]any)["call_id"].(string)
			if handed[id] {
				t.Errorf("call %s handed out twice", id)
			}
			handed[id] = true
		}
		return got
	}
	answer := func(calls []map[string]any, when string) {
		for _, c := range calls {
			if status, body := post(t, w.d.URL()+"/workers/v1/answer", token, answerDoc(c)); status != http.StatusOK {
				t.Fatalf("answer %s: %d %s", when, status, body)
			}
		}
	}
	answer(takeN(1), "before the reload") // answered
	held := takeN(2)                      // handed out across the reload
	w.waitStatus("done", orders, 1, 30*time.Second)

	manifest := filepath.Join(w.dir, "touba.manifest.json")
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(manifest, []byte(strings.ReplaceAll(string(b), `"timeout_ms": 20000`, `"timeout_ms": 25000`)), 0o600); err != nil {
		t.Fatal(err)
	}
	before := strings.Count(w.d.Log(), "configuration reloaded")
	w.d.Signal(syscall.SIGHUP)
	testkit.WaitFor(t, 30*time.Second, func() bool { return strings.Count(w.d.Log(), "configuration reloaded") > before },
		"the daemon to reload")

	answer(held, "of a call handed out before the reload")
	answer(takeN(4), "of a call waiting across the reload")
	w.waitStatus("done", orders, len(ids), 60*time.Second)
	if len(handed) != len(ids) {
		t.Errorf("%d calls handed out, want %d: one per delivery", len(handed), len(ids))
	}
	for _, st := range []string{"parked", "failed", "pending", "running"} {
		if n := w.count(st, orders); n != 0 {
			t.Errorf("%d entries %s after the reload, want none", n, st)
		}
	}
}
