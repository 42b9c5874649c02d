package journal_test

import (
	"context"
	"os"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/sqlite/journal"
)

func TestOpenCreatesFormat(t *testing.T) {
	path := journalPath(t)
	mustOpen(t, path, journal.Options{})
	db, err := sqlitex.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var format string
	if err := db.Read.QueryRow(`SELECT value FROM meta WHERE key = 'format'`).Scan(&format); err != nil {
		t.Fatal(err)
	}
	if got, want := format, "touba-effect-journal-v1"; got != want {
		t.Fatalf("format=%q, want %q", got, want)
	}
	// The contract's columns, by name.
	for table, cols := range map[string][]string{
		"meta":          {"key", "value"},
		"effects":       {"scope", "effect_id", "tool_ref", "operation", "fingerprint", "retry_mode", "state", "attempts", "call_id", "receipt_ref", "result", "error_code", "receipt_error_code", "created_at", "updated_at"},
		"effect_events": {"seq", "scope", "effect_id", "call_id", "state", "at", "detail"},
	} {
		for _, c := range cols {
			var n int
			if err := db.Read.QueryRow(`SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ?`, table, c).Scan(&n); err != nil || n != 1 {
				t.Errorf("%s.%s: missing (%v)", table, c, err)
			}
		}
	}
}

func TestOpenKeepsData(t *testing.T) {
	ctx := context.Background()
	path := journalPath(t)
	j, err := journal.Open(ctx, path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Prepare(ctx, prep("q", "q:step", "c1")); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = mustOpen(t, path, journal.Options{})
	if got, want := mustGet(t, j, "q", "q:step").State, touba.EffectPrepared; got != want {
		t.Fatalf("state=%s, want %s", got, want)
	}
	if e, err := j.Get(ctx, "q", "q:none"); e != nil || err != nil {
		t.Fatalf("absent effect: %v, %v; want nil, nil", e, err)
	}
}

func TestOpenRefusesOtherFiles(t *testing.T) {
	tests := []struct {
		name  string
		setup string
	}{
		{"other format", `CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
			INSERT INTO meta VALUES ('format', 'touba-effect-journal-v2')`},
		{"meta without format", `CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`},
		{"another database", `CREATE TABLE queue (queue_id TEXT PRIMARY KEY)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := journalPath(t)
			db, err := sqlitex.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Write.Exec(tt.setup); err != nil {
				t.Fatal(err)
			}
			db.Close()
			j, err := journal.Open(context.Background(), path, journal.Options{})
			if err == nil {
				j.Close()
				t.Fatal("opened, want refused")
			}
			if got, want := touba.ErrorCode(err), touba.ECONFIG; got != want {
				t.Fatalf("code=%s (%v), want %s", got, err, want)
			}
		})
	}
	t.Run("not sqlite", func(t *testing.T) {
		path := journalPath(t)
		if err := os.WriteFile(path, []byte("this is not a database, it is a text file of some length\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if j, err := journal.Open(context.Background(), path, journal.Options{}); err == nil {
			j.Close()
			t.Fatal("opened, want refused")
		}
	})
}
