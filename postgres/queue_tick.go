package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// LatestTickID returns the greatest event id of triggerRef's entries that
// has the form of a schedule's tick (RFC 3339 in UTC, whole seconds:
// 2026-12-01T03:00:00Z), or "" when it has none: the newest tick any node
// enqueued, which a schedule catches up from at start (package schedule).
func (q *Queue) LatestTickID(ctx context.Context, triggerRef string) (string, error) {
	var id string
	// These ids differ only in digits at fixed places, so any collation
	// orders them as their times; event_id <> '' matches the identity index.
	err := q.db.pool.QueryRow(ctx, `SELECT event_id FROM touba.entries
		WHERE trigger_ref = $1 AND event_id <> ''
		  AND event_id ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$'
		ORDER BY event_id DESC LIMIT 1`, triggerRef).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	} else if err != nil {
		return "", fmt.Errorf("latest tick of %s: %w", triggerRef, err)
	}
	return id, nil
}
