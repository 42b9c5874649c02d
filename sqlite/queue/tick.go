package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// LatestTickID returns the greatest event id of triggerRef's entries that
// has the form of a schedule's tick (RFC 3339 in UTC, whole seconds:
// 2026-12-01T03:00:00Z), or "" when it has none. Such ids sort as their
// times, so this is the newest tick enqueued, by any process, ever: what a
// schedule catches up from at start (package schedule).
func (q *Queue) LatestTickID(ctx context.Context, triggerRef string) (string, error) {
	var id string
	// event_id != '' lets the identity index (partial on it) serve the
	// ORDER BY: the newest id is the first one read.
	err := q.db.Read.QueryRowContext(ctx, `SELECT event_id FROM entries
		WHERE trigger_ref = ? AND event_id != ''
		  AND event_id GLOB '[0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]Z'
		ORDER BY event_id DESC LIMIT 1`, triggerRef).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	} else if err != nil {
		return "", fmt.Errorf("latest tick of %s: %w", triggerRef, err)
	}
	return id, nil
}
