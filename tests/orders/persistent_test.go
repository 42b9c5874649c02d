package orders_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
)

// makePersistent rewrites the example's manifest so that every binding asks
// for one long-lived process (SPEC §4.1). The handler files are unchanged:
// the SDKs serve either mode.
func (e *example) makePersistent() {
	e.t.Helper()
	path := filepath.Join(e.dir, "touba.manifest.json")
	b, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		e.t.Fatal(err)
	}
	for _, binding := range m["bindings"].(map[string]any) {
		h := binding.(map[string]any)["handler"].(map[string]any)
		h["persistent"] = map[string]any{"max_in_flight": 4, "max_calls": 1000, "idle_timeout_ms": 60000}
	}
	if b, err = json.Marshal(m); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// TestPersistentHandlers runs the example with persistent bindings: the
// Node.js and Python handlers answer line-framed requests with their
// call_id, and each binding is served by one process for every delivery.
func TestPersistentHandlers(t *testing.T) {
	e := newExample(t)
	e.makePersistent()
	d := e.start(nil, "--log-level", "debug")

	const n = 6
	for i := 1; i <= n; i++ {
		body := fmt.Sprintf(`{"order_id": "P-%d", "item": "widget", "quantity": %d}`, i, i)
		if a := send(t, d.URL(), fmt.Sprintf("msg_p%d", i), body, webhookSecret); a.status != http.StatusAccepted {
			t.Fatalf("delivery %d: %+v", i, a)
		}
	}
	testkit.WaitFor(t, 60*time.Second, func() bool { return e.stats().Shipments.Performed == n }, fmt.Sprintf("%d shipments", n))
	if got, want := len(e.orders()), n; got != want {
		t.Fatalf("orders=%d, want %d", got, want)
	}
	// Three bindings, three processes, however many calls.
	if got, want := strings.Count(d.Log(), `"handler process started"`), 3; got != want {
		t.Fatalf("handler processes started=%d, want %d (one per persistent binding)\n%s", got, want, d.Log())
	}
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d\n%s", code, d.Log())
	}
	if strings.Contains(d.Log(), `"level":"warn"`) {
		t.Fatalf("warnings in a clean run:\n%s", d.Log())
	}
}
