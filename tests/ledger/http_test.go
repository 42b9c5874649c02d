package ledger_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

// TestLedgerExampleOverHTTP runs the same handler binary behind a webhook
// binding (examples/ledger/touba.webhook.manifest.json): LEDGER_HTTP_ADDR
// makes it serve its tool with handler.HTTPHandler instead of handler.Main.
func TestLedgerExampleOverHTTP(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin", "handler")
	if err := gobuild.Build("", "../../examples/ledger/handler", bin); err != nil {
		t.Fatal(err)
	}
	const secret = "whsec-ledger-over-http-test"
	addr := freeAddr(t)
	ledger := filepath.Join(dir, "ledger.jsonl")
	h := exec.Command(bin)
	h.Env = []string{"PATH=" + os.Getenv("PATH"), "LEDGER_HTTP_ADDR=" + addr, "TOUBA_WEBHOOK_SECRET=" + secret, "LEDGER_FILE=" + ledger}
	var stderr bytes.Buffer
	h.Stderr = &stderr
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Process.Kill()
		h.Wait()
		if t.Failed() {
			t.Logf("handler stderr:\n%s", stderr.String())
		}
	})
	testkit.WaitFor(t, 30*time.Second, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "the ledger handler to listen on "+addr)

	src := filepath.Join("..", "..", "examples", "ledger")
	program, err := os.ReadFile(filepath.Join(src, "program.air.json"))
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join(src, "touba.webhook.manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	manifest = bytes.Replace(manifest, []byte("http://127.0.0.1:8790/book"), []byte("http://"+addr+"/book"), 1)
	for name, b := range map[string][]byte{"program.air.json": program, "touba.manifest.json": manifest} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("LEDGER_WEBHOOK_SECRET", secret)
	journal := filepath.Join(dir, "j.sqlite")
	d := testkit.StartServer(t, server.Config{Program: filepath.Join(dir, "program.air.json"),
		Manifest: filepath.Join(dir, "touba.manifest.json"), Queue: filepath.Join(dir, "q.sqlite"),
		State: filepath.Join(dir, "s.sqlite"), Journal: journal, AdminSocket: filepath.Join(dir, "admin.sock"), Workers: 2})
	for i := 0; i < 3; i++ {
		body := fmt.Sprintf(`{"invoice_id": "inv-%d", "amount": %d}`, i, 10*i)
		if status, _ := testkit.Post(t, d.URL()+"/triggers/examples.ledger/Invoice", "", body, "Content-Type", "application/json"); status != 202 {
			t.Fatalf("invoice %d: status %d", i, status)
		}
	}
	testkit.WaitFor(t, 60*time.Second, func() bool { return strings.Count(d.Log(), `"run done"`) == 3 }, "3 runs done")

	// Anyone else is refused before book runs.
	resp, err := http.Post("http://"+addr+"/book", "application/json", strings.NewReader(`{"protocol":"touba-tool-handler-v1"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an unsigned request: status %d, want 401", resp.StatusCode)
	}

	if err := d.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if n := bookings(t, ledger); n != 3 {
		t.Fatalf("%d bookings, want 3", n)
	}
	effects, _ := testkit.Effects(t, journal)
	if len(effects) != 3 {
		t.Fatalf("%d effects, want 3", len(effects))
	}
	for _, e := range effects {
		if e.State != "applied" || e.ReceiptRef != "ledger:"+e.EffectID {
			t.Fatalf("effect %s: state %s ref %q, want applied with the handler's receipt", e.EffectID, e.State, e.ReceiptRef)
		}
	}
}

// freeAddr returns a loopback address with a port free a moment ago: the
// example takes an address, not a listener.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
