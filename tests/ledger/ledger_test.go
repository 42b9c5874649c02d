// Package ledger_test runs the ledger example (a Go handler on the SDK, in
// persistent mode) through the real daemon.
package ledger_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

func TestLedgerExample(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"program.air.json", "touba.manifest.json"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "examples", "ledger", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := gobuild.Build("", "../../examples/ledger/handler", filepath.Join(dir, "bin", "handler")); err != nil {
		t.Fatal(err)
	}
	d := testkit.StartServer(t, server.Config{Program: filepath.Join(dir, "program.air.json"),
		Manifest: filepath.Join(dir, "touba.manifest.json"), Queue: filepath.Join(dir, "q.sqlite"),
		State: filepath.Join(dir, "s.sqlite"), Journal: filepath.Join(dir, "j.sqlite"),
		AdminSocket: filepath.Join(dir, "admin.sock"), Workers: 4})
	post := func(body string) int {
		status, _ := testkit.Post(t, d.URL()+"/triggers/examples.ledger/Invoice", "", body, "Content-Type", "application/json")
		return status
	}
	for i := 0; i < 5; i++ {
		if got := post(fmt.Sprintf(`{"invoice_id": "inv-%d", "amount": %d}`, i, 10*i)); got != 202 {
			t.Fatalf("invoice %d: status %d", i, got)
		}
	}
	ledger := filepath.Join(dir, ".touba", "ledger.jsonl")
	testkit.WaitFor(t, 60*time.Second, func() bool { return bookings(t, ledger) >= 5 }, "5 bookings in the ledger")
	// Once consumed, the same event is acknowledged (200 consumed) and not
	// run again; the ledger keeps 5 lines.
	testkit.WaitFor(t, 30*time.Second, func() bool { return post(`{"invoice_id": "inv-0", "amount": 0}`) == 200 },
		"the redelivery of a consumed invoice to answer 200 consumed")
	if err := d.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if n := bookings(t, ledger); n != 5 {
		t.Fatalf("%d bookings, want 5", n)
	}
	if strings.Count(d.Log(), `"run done"`) != 5 {
		t.Fatalf("want 5 runs done in the log:\n%s", d.Log())
	}
}

// bookings counts distinct effect ids in the ledger.
func bookings(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return 0
	} else if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var b struct {
			EffectID string `json:"effect_id"`
		}
		if json.Unmarshal(sc.Bytes(), &b) == nil {
			if seen[b.EffectID] {
				t.Fatalf("effect %s booked twice", b.EffectID)
			}
			seen[b.EffectID] = true
		}
	}
	return len(seen)
}
