package journal_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/sqlite/journal"
)

// TestMigrateNoInLists opens a journal the previous release wrote (the
// migrations before 0003): afterwards neither the insert of an effect nor
// its outcome builds a temporary b-tree for the state CHECK's list, the
// CHECK still refuses an unknown state, an applied effect still cannot be
// rewritten, and the rows are intact.
func TestMigrateNoInLists(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "j.sqlite")
	db := testkit.OldFile(t, path, "migrations", "0003")
	if n, err := sqlitex.TempBTrees(ctx, db.Read, journal.QInsertEffect); err != nil || n == 0 {
		t.Fatalf("before 0003 the insert opens %d temporary b-trees (%v), want some", n, err)
	}
	for _, state := range []string{"prepared", "dispatched", "applied", "not_applied", "unknown"} {
		if _, err := db.Write.ExecContext(ctx, `INSERT INTO effects (scope, effect_id, tool_ref, operation, fingerprint,
			retry_mode, state, attempts, created_at, updated_at) VALUES ('s', ?, 't', 'o', 'f', 'never', ?, 1, 'a', 'a')`,
			"e_"+state, state); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(ctx, path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	raw, err := sqlitex.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()

	for _, s := range []string{journal.QInsertEffect, journal.QFinish} {
		if n, err := sqlitex.TempBTrees(ctx, raw.Read, s); err != nil || n != 0 {
			t.Errorf("after 0003 %q opens %d temporary b-trees (%v), want 0", s, n, err)
		}
		// The writer that ran the migration compiles under the new schema too.
		if n, err := j.WriterTempBTrees(ctx, s); err != nil || n != 0 {
			t.Errorf("after 0003 the migrating writer's %q opens %d temporary b-trees (%v), want 0", s, n, err)
		}
	}
	var sql, check string
	if err := raw.Read.QueryRowContext(ctx, `SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'effects'`).
		Scan(&sql); err != nil || strings.Contains(sql, "state IN (") {
		t.Errorf("effects' schema still holds a state IN list (%v):\n%s", err, sql)
	}
	if err := raw.Read.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check = %q (%v)", check, err)
	}
	var n int
	if err := raw.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM effects`).Scan(&n); err != nil || n != 5 {
		t.Errorf("%d effects after the migration (%v), want 5", n, err)
	}
	_, err = raw.Write.ExecContext(ctx, `UPDATE effects SET state = 'done' WHERE effect_id = 'e_prepared'`)
	if err == nil || !strings.Contains(err.Error(), "CHECK constraint failed") {
		t.Errorf("an unknown state was written: %v", err)
	}
	_, err = raw.Write.ExecContext(ctx, `UPDATE effects SET state = 'unknown' WHERE effect_id = 'e_applied'`)
	if err == nil || !strings.Contains(err.Error(), "never rewritten") {
		t.Errorf("an applied effect was rewritten: %v", err)
	}
}
