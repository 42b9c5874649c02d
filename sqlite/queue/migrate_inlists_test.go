package queue_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// TestMigrateNoInLists opens a queue file the previous release wrote (the
// migrations before 0014): afterwards no write of an entry builds a
// temporary b-tree for a list of constants, the CHECK still refuses an
// unknown status, the rows are intact, the two rebuilt partial indexes
// serve the queries that read them, and the previous release's spelling
// of those queries still gets the same answers.
func TestMigrateNoInLists(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.sqlite")
	db := testkit.OldFile(t, path, "schema", "0014")
	// Before: the old file's insert builds temporary b-trees (the test
	// below would not notice a regression if this were already zero).
	if n, err := sqlitex.TempBTrees(ctx, db.Read, queue.QInsert); err != nil || n == 0 {
		t.Fatalf("before 0014 the insert opens %d temporary b-trees (%v), want some", n, err)
	}
	for i, row := range []struct{ status, key string }{
		{"pending", "k"}, {"running", "k"}, {"parked", "k"}, {"waiting", "k"}, {"done", "k"}, {"failed", ""},
		{"cancelled", ""}, {"merged", ""}, {"done", ""},
	} {
		if _, err := db.Write.ExecContext(ctx, `INSERT INTO entries (queue_id, trigger_ref, event_id, digest, body, headers,
			remote_addr, received_at, status, updated_at, conc_key) VALUES (?, 'trigger:t', ?, 'd', X'7b7d', '{}', '',
			'2026-12-01T10:00:00.000Z', ?, '2026-12-01T10:00:00.000Z', NULLIF(?, ''))`,
			"q"+string(rune('1'+i)), "evt_"+string(rune('1'+i)), row.status, row.key); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	q, err := queue.Open(ctx, path, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	// The writer that ran the migration compiles under the new schema too.
	if err := q.SubmitOp(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		n, err := tx.TempBTrees(queue.QInsert)
		if err == nil && n != 0 {
			t.Errorf("the migrating writer's insert opens %d temporary b-trees, want 0", n)
		}
		return 0, err
	}); err != nil {
		t.Fatal(err)
	}
	raw, err := sqlitex.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()

	for _, s := range []string{queue.QInsert,
		`UPDATE entries SET status = ?, updated_at = ? WHERE queue_id = ?`} {
		if n, err := sqlitex.TempBTrees(ctx, raw.Read, s); err != nil || n != 0 {
			t.Errorf("after 0014 %q opens %d temporary b-trees (%v), want 0", s, n, err)
		}
	}
	var schema string
	if err := raw.Read.QueryRowContext(ctx, `SELECT group_concat(sql, ';') FROM sqlite_schema
		WHERE tbl_name = 'entries' AND sql IS NOT NULL`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(schema, "status IN (") {
		t.Errorf("entries' schema still holds a status IN list:\n%s", schema)
	}
	var check string
	if err := raw.Read.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check = %q (%v)", check, err)
	}
	_, err = raw.Write.ExecContext(ctx, `UPDATE entries SET status = 'finished' WHERE queue_id = 'q1'`)
	if err == nil || !strings.Contains(err.Error(), "CHECK constraint failed") {
		t.Errorf("an unknown status was written: %v", err)
	}

	plan := func(query string, args ...any) string {
		t.Helper()
		steps, err := sqlitex.QueryPlan(ctx, raw.Read, query, args...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(steps, "\n")
	}
	// A key's statements read entries_key unasked, as they did with IN.
	for _, s := range []string{queue.ActiveOfKey, queue.ReleaseNext, queue.Rehold} {
		if p := plan(s, "trigger:t", "k", 10); !strings.Contains(p, "USING INDEX entries_key") || strings.Contains(p, "SCAN entries") {
			t.Errorf("%s\ndoes not read a key's entries through entries_key:\n%s", s, p)
		}
	}
	// INDEXED BY fails to compile ("no query solution") unless the
	// query's WHERE holds the index's predicate.
	finished := `SELECT queue_id, received_at FROM entries INDEXED BY entries_finished WHERE ` + queue.FinishedList + `
		AND received_at < ?1 AND (received_at, queue_id) > (?2, ?3) ORDER BY received_at, queue_id LIMIT ?4`
	if p := plan(finished, "2027-01-01", "", "", 100); !strings.Contains(p, "entries_finished") {
		t.Errorf("finished entries are not read through entries_finished:\n%s", p)
	}

	// Same answers, through the index and in the previous release's words.
	for _, c := range []struct {
		query string
		args  []any
		want  int
	}{
		{queue.ActiveOfKey, []any{"trigger:t", "k", 10}, 4},
		{`SELECT COUNT(*) FROM entries WHERE trigger_ref = ? AND conc_key = ? AND conc_key IS NOT NULL
			AND status IN ('pending', 'running', 'parked', 'waiting') AND (status <> 'parked' OR error_code IS NOT 'ProgramChanged')`,
			[]any{"trigger:t", "k"}, 4},
		{`SELECT COUNT(*) FROM entries WHERE ` + queue.FinishedList, nil, 4},
		{`SELECT COUNT(*) FROM entries WHERE status IN ('done', 'cancelled', 'merged')`, nil, 4},
	} {
		var n int
		if err := raw.Read.QueryRowContext(ctx, c.query, c.args...).Scan(&n); err != nil || n != c.want {
			t.Errorf("%s = %d (%v), want %d", c.query, n, err, c.want)
		}
	}
}
