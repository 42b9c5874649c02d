package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// LatestTickID returns the newest tick of the schedule trigger triggerRef
// enqueued, by any process, ever, or "" when it has none: what a schedule
// catches up from at start (package schedule). It is the greater of the
// trigger's schedule cursor (moved by each tick's enqueue, never forgotten
// by --history) and the greatest event id of its entries that has the
// form of a tick (RFC 3339 in UTC, whole seconds: 2026-12-01T03:00:00Z),
// which a file written by the previous release, without cursors, holds.
// Such ids sort as their times.
func (q *Queue) LatestTickID(ctx context.Context, triggerRef string) (string, error) {
	var id sql.NullString
	// event_id != '' lets the identity index (partial on it) serve the
	// ORDER BY: the newest id is the first one read.
	err := q.db.Read.QueryRowContext(ctx, `SELECT MAX(id) FROM (
		SELECT tick_id AS id FROM schedule_cursors WHERE trigger_ref = ?1
		UNION ALL
		SELECT id FROM (SELECT event_id AS id FROM entries
			WHERE trigger_ref = ?1 AND event_id != ''
			  AND event_id GLOB '[0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]Z'
			ORDER BY event_id DESC LIMIT 1))`, triggerRef).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	} else if err != nil {
		return "", fmt.Errorf("latest tick of %s: %w", triggerRef, err)
	}
	return id.String, nil
}

// moveCursor moves the schedule cursor of d's trigger to d's event id when
// d is a tick past it, in the transaction that enqueues d: a tick in the
// queue and its cursor commit together.
func moveCursor(ctx context.Context, tx *sqlitex.Tx, d *touba.Delivery) error {
	if !d.Tick || d.EventID == "" {
		return nil
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO schedule_cursors (trigger_ref, tick_id) VALUES (?, ?)
		ON CONFLICT (trigger_ref) DO UPDATE SET tick_id = excluded.tick_id WHERE excluded.tick_id > schedule_cursors.tick_id`,
		d.TriggerRef, d.EventID)
	if err != nil {
		return fmt.Errorf("schedule cursor of %s: %w", d.TriggerRef, err)
	}
	return nil
}
