package sqlitex_test

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// A migration that declares a level records it in its own transaction;
// a binary that does not know that level refuses the file, SchemaTooNew,
// naming both, on a read-write and on a read-only open. A failed
// migration records no level.
func TestMigrateRecordsDeclaredLevel(t *testing.T) {
	ctx := context.Background()
	older := fstest.MapFS{"m/0001_a.sql": {Data: []byte(`CREATE TABLE a (x INTEGER) STRICT;`)}}
	newer := fstest.MapFS{
		"m/0001_a.sql": older["m/0001_a.sql"],
		"m/0002_b.sql": {Data: []byte("-- b drops what 0001 wrote\n-- touba:oldest-compatible 0002_b.sql\nCREATE TABLE b (y INTEGER) STRICT;")},
		"m/0003_c.sql": {Data: []byte(`CREATE TABLE c (z INTEGER) STRICT;`)},
	}
	db := open(t)
	if err := sqlitex.Migrate(ctx, db, older, "m"); err != nil {
		t.Fatal(err)
	}
	if err := sqlitex.Migrate(ctx, db, newer, "m"); err != nil {
		t.Fatal(err)
	}
	var level, by string
	if err := db.Read.QueryRow(`SELECT (SELECT value FROM schema_compat WHERE key = 'oldest_compatible'),
		(SELECT value FROM schema_compat WHERE key = 'oldest_compatible_set_by')`).Scan(&level, &by); err != nil {
		t.Fatal(err)
	}
	if level != "0002_b.sql" || by != "0003_c.sql" {
		t.Fatalf("level %q set by %q, want 0002_b.sql set by 0003_c.sql", level, by)
	}
	for name, check := range map[string]func() error{
		"migrate":        func() error { return sqlitex.Migrate(ctx, db, older, "m") },
		"check migrated": func() error { return sqlitex.CheckMigrated(ctx, db, older, "m") },
	} {
		err := check()
		if touba.ErrorCode(err) != touba.ESchemaTooNew {
			t.Fatalf("%s with only 0001: %v, want SchemaTooNew", name, err)
		}
		for _, want := range []string{"0002_b or later", "up to 0003_c", "knows up to 0001_a"} {
			if !strings.Contains(touba.ErrorMessage(err), want) {
				t.Errorf("%s: refusal %q does not say %q", name, touba.ErrorMessage(err), want)
			}
		}
	}

	broken := fstest.MapFS{
		"m/0001_a.sql": older["m/0001_a.sql"],
		"m/0002_b.sql": {Data: []byte("-- touba:oldest-compatible 0002_b.sql\nCREATE TABLE b (y INTEGER) STRICT; SELECT no_such_function();")},
	}
	db2 := open(t)
	if err := sqlitex.Migrate(ctx, db2, broken, "m"); err == nil {
		t.Fatal("a failing migration migrated")
	}
	if err := sqlitex.Migrate(ctx, db2, older, "m"); err != nil {
		t.Fatalf("the level of a migration that failed was kept: %v", err)
	}
}
