package main

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/cli"
	"github.com/touba/touba-trigger/sqlite"
)

// SPEC §8 "Rolling upgrades", on SQLite: serve on files a newer release
// declared incompatible with this binary refuses start-up, SchemaTooNew,
// exit 2, naming both versions.
func TestServeRefusesSchemaTooNew(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	file := func(name string) string { return filepath.Join(dir, name) }
	c := sqlite.Config{Queue: file("q"), State: file("s"), Journal: file("j")}
	s, err := sqlite.Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("sqlite3", "file:"+c.Queue)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(`UPDATE schema_compat SET value = CASE key WHEN 'oldest_compatible' THEN '0042_contract.sql' ELSE '0043_next.sql' END`)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"program.json", "manifest.json"} {
		data := map[string]string{"program.json": refusalProgram, "manifest.json": refusalManifest}[name]
		if err := os.WriteFile(file(name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	exit := Run(ctx, []string{"serve", file("program.json"), "--manifest", file("manifest.json"), "--queue", c.Queue, "--state", c.State,
		"--effect-journal", c.Journal, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--admin-socket", file("admin.sock")}, &stdout, &stderr)
	out := strings.TrimRight(stderr.String(), "\n")
	line := out[strings.LastIndex(out, "\n")+1:]
	if exit != cli.ExitUsage || !strings.HasPrefix(line, touba.ESchemaTooNew+": ") {
		t.Fatalf("serve: exit %d, last line %q; want exit %d and %s\n%s", exit, line, cli.ExitUsage, touba.ESchemaTooNew, out)
	}
	for _, want := range []string{"0042_contract or later", "0043_next", "knows up to 0015_purge_marks"} {
		if !strings.Contains(line, want) {
			t.Errorf("refusal %q does not say %q", line, want)
		}
	}
}
