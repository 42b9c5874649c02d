package queue_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// TestMigrateScheduleCursor opens a queue file the previous release wrote
// (the migrations before 0009, no schedule cursors): 0009 takes each
// trigger's newest tick from its entries as its cursor, so the tick stays
// known once --history forgets its entry.
func TestMigrateScheduleCursor(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.sqlite")
	db := testkit.OldFile(t, path, "schema", "0009")
	for i, row := range [][2]string{
		{"trigger:s", "2026-12-01T10:01:00Z"}, {"trigger:s", "2026-12-01T10:02:00Z"}, {"trigger:s", "zzzz"},
		{"trigger:w", "evt_1"},
	} {
		if _, err := db.Write.ExecContext(ctx, `INSERT INTO entries (queue_id, trigger_ref, event_id, digest, body, headers,
			remote_addr, received_at, status, updated_at) VALUES (?, ?, ?, 'd', X'7b7d', '{}', '', '2026-12-01T10:00:00.000Z',
			'done', '2026-12-01T10:00:00.000Z')`, "q"+string(rune('1'+i)), row[0], row[1]); err != nil {
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
	raw, err := sqlitex.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	// The entries go (as --history would delete them): the cursor stays.
	if _, err := raw.Write.ExecContext(ctx, `DELETE FROM entries`); err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]string{"trigger:s": "2026-12-01T10:02:00Z", "trigger:w": ""} {
		if got, err := q.LatestTickID(ctx, ref); err != nil || got != want {
			t.Errorf("latest tick of %s after the migration = %q (%v), want %q", ref, got, err, want)
		}
	}
}
