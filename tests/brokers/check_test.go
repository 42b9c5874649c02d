package brokers_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/natstest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// check prints a nats binding's destination and the window it reads from
// the stream, with what it means for an unknown publish; a stream it cannot
// read is said so, and check still passes.
func TestCheckPrintsTheWindow(t *testing.T) {
	s := natstest.Start(t)
	s.Stream("ORDERS", 90*time.Second, "orders.>")
	dir := t.TempDir()
	prog := writeFile(t, dir, "program.air.json", program)
	man := writeFile(t, dir, "touba.manifest.json", natsManifest(s.URL(), 5))
	out, err := exec.Command(testkit.Binary(t), "check", prog, "--manifest", man).CombinedOutput()
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}
	for _, want := range []string{
		"PUBLISH " + s.URL() + " subject orders.{/shop_domain} stream ORDERS",
		"subject reads: /shop_domain  body: the whole input  Nats-Msg-Id: the effect id",
		"dedupe window: 1m30s (duplicate_window): an unknown publish is re-sent with the same id until first dispatch + 1m25s, then parked",
		"tool:orders/Publish  nats  effect=external_write/idempotency_key  max_concurrency=64 (default)",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("check lacks %q:\n%s", want, out)
		}
	}
	s.Stop()
	out, err = exec.Command(testkit.Binary(t), "check", prog, "--manifest", man).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "dedupe window: not read now") {
		t.Fatalf("check with the broker down: %v\n%s", err, out)
	}
}
