package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/mattn/go-sqlite3"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/schemacompat"
	"github.com/touba/touba-trigger/sqlite"
)

// files are the three files of a store in a folder of t's, created by
// this binary.
func files(t *testing.T) sqlite.Config {
	t.Helper()
	dir := t.TempDir()
	c := sqlite.Config{Queue: filepath.Join(dir, "q.sqlite"), State: filepath.Join(dir, "s.sqlite"), Journal: filepath.Join(dir, "j.sqlite")}
	s, err := sqlite.Open(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return c
}

// rawDB opens path as a plain SQLite file, to change it behind the store.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func level(t *testing.T, db *sql.DB) (level, by string) {
	t.Helper()
	if err := db.QueryRow(`SELECT (SELECT value FROM schema_compat WHERE key = ?), (SELECT value FROM schema_compat WHERE key = ?)`,
		schemacompat.KeyOldest, schemacompat.KeySetBy).Scan(&level, &by); err != nil {
		t.Fatal(err)
	}
	return level, by
}

// Each file records its oldest-compatible level (none of its migrations
// declares one: any binary that knows the file), and the newest migration
// of the binary that recorded it.
func TestFilesRecordTheirLevel(t *testing.T) {
	c := files(t)
	for _, f := range []struct{ path, level, by string }{
		{c.Queue, "0001_entries.sql", "0015_purge_marks.sql"},
		{c.State, "0001_deliveries.sql", "0006_operator_reason.sql"},
		{c.Journal, "0001_init.sql", "0003_no_in_lists.sql"},
	} {
		if l, by := level(t, rawDB(t, f.path)); l != f.level || by != f.by {
			t.Errorf("%s: level %q set by %q, want %q set by %q", filepath.Base(f.path), l, by, f.level, f.by)
		}
	}
}

// SPEC §8 "Rolling upgrades", on SQLite too: a file whose recorded level
// is past this binary's newest migration of it was written by a release
// that declared older ones incompatible; Open refuses it, SchemaTooNew,
// naming both, read-write and read-only alike, and changes nothing.
func TestSchemaTooNewFile(t *testing.T) {
	ctx := context.Background()
	for _, f := range []struct{ name, newest string }{
		{"queue", "0015_purge_marks"}, {"state", "0006_operator_reason"}, {"journal", "0003_no_in_lists"},
	} {
		t.Run(f.name, func(t *testing.T) {
			c := files(t)
			path := map[string]string{"queue": c.Queue, "state": c.State, "journal": c.Journal}[f.name]
			db := rawDB(t, path)
			if _, err := db.Exec(`UPDATE schema_compat SET value = CASE key WHEN ? THEN '0042_contract.sql' ELSE '0043_next.sql' END`,
				schemacompat.KeyOldest); err != nil {
				t.Fatal(err)
			}
			before := fileShape(t, db)
			for _, ro := range []bool{false, true} {
				cc := c
				cc.ReadOnly = ro
				s, err := sqlite.Open(ctx, cc)
				if err == nil {
					s.Close()
				}
				if got := touba.ErrorCode(err); got != touba.ESchemaTooNew {
					t.Fatalf("read-only %v: %v (code %s), want %s", ro, err, got, touba.ESchemaTooNew)
				}
				for _, want := range []string{path, "0042_contract or later", "0043_next", "knows up to " + f.newest} {
					if !strings.Contains(touba.ErrorMessage(err), want) {
						t.Errorf("read-only %v: refusal %q does not say %q", ro, touba.ErrorMessage(err), want)
					}
				}
			}
			if after := fileShape(t, db); after != before {
				t.Errorf("the refused opens changed the file:\n%s\nwas:\n%s", after, before)
			}
		})
	}
}

// A binary opens files of a newer release that kept the level (release N
// on N+1's files), lowers no level a newer release raised, and opening
// up-to-date files again changes nothing.
func TestNewerFilesAndReopen(t *testing.T) {
	ctx := context.Background()
	c := files(t)
	q := rawDB(t, c.Queue)
	for _, stmt := range []string{
		`ALTER TABLE entries ADD COLUMN next_release TEXT`,
		`INSERT INTO schema_migrations (name, applied_at) VALUES ('0008_next.sql', '2027-01-01T00:00:00.000Z')`,
		`UPDATE schema_compat SET value = '0005_holds.sql' WHERE key = 'oldest_compatible'`,
	} {
		if _, err := q.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	shapes := func() string {
		var b strings.Builder
		for _, p := range []string{c.Queue, c.State, c.Journal} {
			b.WriteString(fileShape(t, rawDB(t, p)))
		}
		return b.String()
	}
	before := shapes()
	for i := range 2 {
		s, err := sqlite.Open(ctx, c)
		if err != nil {
			t.Fatalf("open %d on the next release's files: %v", i, err)
		}
		s.Close()
		if after := shapes(); after != before {
			t.Fatalf("open %d changed the files:\n%s\nwas:\n%s", i, after, before)
		}
	}
	if l, _ := level(t, q); l != "0005_holds.sql" {
		t.Errorf("queue level %q, want 0005_holds.sql kept", l)
	}
}

// fileShape is a file's schema and its records of migrations and level.
func fileShape(t *testing.T, db *sql.DB) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT type || ' ' || name || ' ' || COALESCE(sql, '') FROM sqlite_master ORDER BY type, name`,
		`SELECT name || '@' || applied_at FROM schema_migrations ORDER BY name`,
		`SELECT key || '=' || value FROM schema_compat ORDER BY key`,
	} {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			b.WriteString(s + "\n")
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	return b.String()
}
