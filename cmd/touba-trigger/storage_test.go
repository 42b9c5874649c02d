package main_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

const billProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:ops/Bills", "source": {"kind": "webhook"},
   "steps": [{"id": "bill", "tool": "tool:ops/Bill", "input": {"bill": {"$ref": "/event/body"}}}]}]}`

const billManifest = `{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:ops/Bill": {"handler": {"kind": "accounting_stub"}, "timeout_ms": 1000,
    "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`

// TestStorageCommand (SPEC §6, §8.1): `storage` prints each file's size,
// the oldest entries and the window, from the running daemon (its
// --history and last pass) and, with none running, from the files
// read-only (2160h by default, or --history's what-if).
func TestStorageCommand(t *testing.T) {
	e := newOpEnv(t, billProgram, billManifest)
	d := e.start(t, func(c *server.Config) { c.History = time.Hour })
	for _, id := range []string{"b1", "b2", "b3"} {
		if code, _ := testkit.Post(t, d.URL()+"/triggers/ops/Bills", id, `{"n":1}`); code != http.StatusAccepted {
			t.Fatalf("post %s: %d", id, code)
		}
	}
	testkit.WaitFor(t, 10*time.Second, func() bool {
		code, _ := testkit.Post(t, d.URL()+"/triggers/ops/Bills", "b3", `{"n":1}`)
		return code == http.StatusOK
	}, "the entries to run")
	var rep admin.StorageReport
	testkit.WaitFor(t, 10*time.Second, func() bool {
		e.cliJSON(t, &rep, "storage")
		return rep.LastPass != nil
	}, "the daemon's first pass")
	if rep.Backend != "sqlite" || len(rep.Sizes) != 3 || rep.HistorySeconds != 3600 || rep.OldestEntry == nil || rep.OldestFinished == nil {
		t.Fatalf("storage --json from the daemon: %+v", rep)
	}
	code, out, errs := e.cli(t, "storage")
	if code != 0 || !strings.Contains(out, "queue") || !strings.Contains(out, "journal") || !strings.Contains(out, "history:          1h0m0s") ||
		!strings.Contains(out, "last pass:") {
		t.Fatalf("storage from the daemon: exit %d\n%s%s", code, out, errs)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	code, out, errs = e.cli(t, "storage")
	if code != 0 || !strings.Contains(out, "2160h0m0s (90 days)") || !strings.Contains(out, "next pass frees:  0 entries") {
		t.Fatalf("storage on the files: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = e.cli(t, "storage", "--history", "1ms")
	if code != 0 || !strings.Contains(out, "next pass frees:  3 entries") {
		t.Fatalf("storage --history 1ms on the files: exit %d\n%s%s", code, out, errs)
	}
}

// The same on PostgreSQL: the partitioned tables and the small ones,
// from the daemon and, with none, from the database.
func TestStorageCommandPostgres(t *testing.T) {
	e := newOpEnv(t, billProgram, billManifest)
	e.db = pgtest.New(t)
	d := e.start(t, func(c *server.Config) { c.History = time.Hour })
	if code, _ := testkit.Post(t, d.URL()+"/triggers/ops/Bills", "b1", `{"n":1}`); code != http.StatusAccepted {
		t.Fatalf("post: %d", code)
	}
	var rep admin.StorageReport
	testkit.WaitFor(t, 10*time.Second, func() bool {
		e.cliJSON(t, &rep, "storage")
		return rep.LastPass != nil
	}, "the daemon's first pass")
	sizes := map[string]int64{}
	for _, s := range rep.Sizes {
		sizes[s.Name] = s.Bytes
	}
	// A new database is partitioned at open; its first rows are in <t>_old
	// until the first time partitions (partition.go).
	if rep.Backend != "postgres" || rep.Note != "" || len(sizes) != 10 || sizes["entries"] == 0 || sizes["effect_events"] == 0 || rep.OldestEntry == nil {
		t.Fatalf("storage --json from the daemon: %+v", rep)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	code, out, errs := e.cli(t, "storage")
	if code != 0 || !strings.Contains(out, "TABLE") || !strings.Contains(out, "entries") || !strings.Contains(out, "2160h0m0s (90 days)") {
		t.Fatalf("storage on the database: exit %d\n%s%s", code, out, errs)
	}
}
