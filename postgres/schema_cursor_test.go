package postgres

import (
	"context"
	"testing"

	"github.com/touba/touba-trigger/internal/uuidv7"
)

// TestMigrateScheduleCursor: on a database the previous release wrote
// (through 0015, no schedule cursors), 0016 takes each trigger's newest
// tick from its entries as its cursor, so the tick stays known once
// --history forgets its entry (issue 42); other event ids count for
// nothing.
func TestMigrateScheduleCursor(t *testing.T) {
	ctx := context.Background()
	url := migratedThrough(t, "0015_history")
	conn := superConn(t, url)
	for _, r := range [][2]string{
		{"trigger:s", "2026-12-01T10:01:00Z"}, {"trigger:s", "2026-12-01T10:02:00Z"}, {"trigger:s", "zzzz"},
		{"trigger:w", "evt_1"},
	} {
		mustExec(t, conn, `INSERT INTO touba.entries (queue_id, trigger_ref, event_id, digest, headers, remote_addr, received_at,
			status, updated_at) VALUES ($1, $2, $3, 'd', '{}', '', '2026-12-01T10:00:00.000Z', 'done', '2026-12-01T10:00:00.000Z')`,
			uuidv7.New(), r[0], r[1])
	}
	if err := runMigrations(ctx, t, url, embeddedMigrations(t), DefaultTimeout); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := conn.QueryRow(ctx, `SELECT COALESCE(string_agg(trigger_ref || '=' || tick_id, ' ' ORDER BY trigger_ref), '')
		FROM touba.schedule_cursors`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if want := "trigger:s=2026-12-01T10:02:00Z"; got != want {
		t.Fatalf("cursors after 0016: %q, want %q", got, want)
	}
}
