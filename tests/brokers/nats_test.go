// Package brokers_test runs the real binary against broker destinations
// (SPEC §2.2 "Broker destinations"): NATS JetStream embedded in the test
// binary (internal/natstest), Kafka as kfake.
package brokers_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/natstest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// program publishes each Shopify-like order: one step, the whole body.
const program = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:shop/Orders", "source": {"kind": "webhook"},
   "steps": [{"id": "publish", "tool": "tool:orders/Publish", "input": {"$ref": "/event/body"}}],
   "retry": {"max_attempts": 60, "initial_interval_ms": 50, "max_interval_ms": 500}}]}`

// natsManifest publishes to orders.<shop> in stream ORDERS.
func natsManifest(url string, timeoutSec int) string {
	return fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:orders/Publish": {"handler": {"kind": "nats", "options": {"url": %q, "subject": "orders.{/shop_domain}",
      "stream": "ORDERS", "timeout_sec": %d}},
    "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`, url, timeoutSec)
}

// daemon is one daemon's files, started and restarted on the same folder.
type daemon struct {
	t                                  *testing.T
	dir, program, manifest, queue, jrn string
	extra                              []string
	env                                []string // added to the daemon's environment
	d                                  *testkit.Daemon
}

func newDaemon(t *testing.T, manifest string, extra ...string) *daemon {
	t.Helper()
	dir := t.TempDir()
	w := &daemon{t: t, dir: dir, queue: filepath.Join(dir, "q.sqlite"), jrn: filepath.Join(dir, "j.sqlite"), extra: extra}
	w.program = writeFile(t, dir, "program.air.json", program)
	w.manifest = writeFile(t, dir, "touba.manifest.json", manifest)
	return w
}

func (w *daemon) start() {
	w.t.Helper()
	args := append([]string{"serve", w.program, "--manifest", w.manifest, "--queue", w.queue,
		"--state", filepath.Join(w.dir, "s.sqlite"), "--effect-journal", w.jrn, "--admin-socket", w.socket(),
		"--listen", "127.0.0.1:0", "--metrics-listen", "", "--take-over-stale-lock", "--workers", "4"}, w.extra...)
	w.d = testkit.Start(w.t, w.env, args...)
}

func (w *daemon) socket() string { return filepath.Join(w.dir, "admin.sock") }

func (w *daemon) stop() {
	w.t.Helper()
	w.d.Signal(syscall.SIGTERM)
	if code := w.d.Wait(60 * time.Second); code != 0 {
		w.t.Fatalf("exit %d\n%s", code, w.d.Log())
	}
}

func (w *daemon) post(eventID, shop string) (int, string) {
	return testkit.Post(w.t, w.d.URL()+"/triggers/shop/Orders", eventID,
		fmt.Sprintf(`{"id": %q, "shop_domain": %q, "total": "10.00"}`, eventID, shop))
}

func (w *daemon) entry(id string) *admin.EntryDetail {
	w.t.Helper()
	c, err := admin.Dial(w.socket())
	if err != nil {
		return nil
	}
	d, err := c.Entry(context.Background(), id)
	if err != nil {
		return nil
	}
	return d
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// byEffect counts the stream's messages by Nats-Msg-Id.
func byEffect(t *testing.T, s *natstest.Server) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, m := range s.Messages("ORDERS") {
		out[m.Header.Get("Nats-Msg-Id")]++
	}
	return out
}

// onceEach checks that the stream holds exactly one message of each
// accepted delivery's effect, and nothing else.
func onceEach(t *testing.T, s *natstest.Server, ids []string) {
	t.Helper()
	got := byEffect(t, s)
	for _, id := range ids {
		if n := got[id+":publish"]; n != 1 {
			t.Errorf("effect %s:publish is %d times in the stream, want once", id, n)
		}
	}
	if len(got) != len(ids) {
		t.Errorf("the stream holds %d effects, want %d", len(got), len(ids))
	}
}

// N deliveries through the real binary: N messages in the stream, each
// once, on the shop's subject, with the effect id as Nats-Msg-Id and in
// touba-effect-id, the event id and the trigger.
func TestNATSDeliveries(t *testing.T) {
	s := natstest.Start(t)
	s.Stream("ORDERS", 2*time.Minute, "orders.>")
	w := newDaemon(t, natsManifest(s.URL(), 5))
	w.start()
	const n = 50
	var ids []string
	for i := range n {
		status, id := w.post(fmt.Sprintf("ord-%d", i), "shop-"+fmt.Sprint(i%3)+".myshopify.com")
		if status != http.StatusAccepted {
			t.Fatalf("post %d: %d", i, status)
		}
		ids = append(ids, id)
	}
	testkit.WaitFor(t, 60*time.Second, func() bool { return len(byEffect(t, s)) == n }, "n messages in the stream")
	w.stop()
	onceEach(t, s, ids)
	for _, m := range s.Messages("ORDERS") {
		if !strings.HasPrefix(m.Subject, "orders.shop-") || !strings.HasSuffix(m.Subject, "%2Emyshopify%2Ecom") ||
			m.Header.Get("touba-effect-id") != m.Header.Get("Nats-Msg-Id") || !strings.HasPrefix(m.Header.Get("touba-event-id"), "ord-") ||
			m.Header.Get("touba-trigger") != "trigger:shop/Orders" || !strings.Contains(m.Data, `"total"`) {
			t.Fatalf("message %+v", m)
		}
	}
	for _, e := range testkit.Entries(t, w.queue) {
		if e.Status != touba.StatusDone {
			t.Errorf("entry %s is %s", e.QueueID, e.Status)
		}
	}
}

// The broker stopped and restarted mid-load, then the daemon SIGKILLed
// mid-load and started again on the same files: every accepted delivery
// is in the stream exactly once (inside the stream's window, an unknown
// publish is sent again with its id and acknowledged as a duplicate).
func TestNATSBrokerRestartAndDaemonKill(t *testing.T) {
	s := natstest.Start(t)
	s.Stream("ORDERS", 2*time.Minute, "orders.>")
	w := newDaemon(t, natsManifest(s.URL(), 2))
	w.start()
	var mu sync.Mutex
	var ids []string
	post := func(from, to int) {
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := from + g; i < to; i += 4 {
					if status, id := w.post(fmt.Sprintf("ord-%d", i), "s.example"); status == http.StatusAccepted {
						mu.Lock()
						ids = append(ids, id)
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
	}
	post(0, 60)
	s.Stop() // the broker goes away mid-load
	post(60, 120)
	time.Sleep(500 * time.Millisecond) // runs meet the broker down
	s.Restart()
	post(120, 180)
	testkit.WaitFor(t, 60*time.Second, func() bool { return len(byEffect(t, s)) >= 150 }, "most messages published")
	w.d.Kill() // mid-load
	w.start()
	post(180, 240)
	testkit.WaitFor(t, 120*time.Second, func() bool { return len(byEffect(t, s)) == len(ids) }, "every accepted delivery published")
	w.stop()
	if len(ids) != 240 {
		t.Fatalf("%d deliveries accepted, want 240", len(ids))
	}
	onceEach(t, s, ids)
	for _, e := range testkit.Entries(t, w.queue) {
		if e.Status != touba.StatusDone {
			t.Errorf("entry %s is %s", e.QueueID, e.Status)
		}
	}
}

// TestMain removes the daemon binary testkit builds once the tests end.
func TestMain(m *testing.M) { gobuild.Main(m, nil) }
