package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Detail is what an operator needs of an entry beyond touba.Delivery: why it
// stopped and when it may run next.
type Detail = touba.EntryDetail

// Detail returns the entry's error message, retry time and body size, or
// nil and no error when there is no such entry.
func (q *Queue) Detail(ctx context.Context, queueID string) (*Detail, error) {
	var msg, notBefore, routing sql.NullString
	var size sql.NullInt64
	err := q.db.Read.QueryRowContext(ctx, `SELECT error_message, not_before, length(body), routing FROM entries WHERE queue_id = ?`,
		queueID).Scan(&msg, &notBefore, &size, &routing)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("entry %s: %w", queueID, err)
	}
	d := &Detail{ErrorMessage: msg.String, BodyBytes: -1}
	if size.Valid {
		d.BodyBytes = size.Int64
	}
	if notBefore.Valid {
		t, err := touba.ParseTime(notBefore.String)
		if err != nil {
			return nil, fmt.Errorf("entry %s: not_before: %w", queueID, err)
		}
		d.NotBefore = &t
	}
	if d.Routing, err = touba.ParseRouting([]byte(routing.String)); err != nil {
		return nil, fmt.Errorf("entry %s: routing: %w", queueID, err)
	}
	return d, nil
}

// OldestPending returns when the oldest pending entry was received, and
// false when none is pending. Queue ids are UUIDv7, so the status index
// gives the oldest in one step.
func (q *Queue) OldestPending(ctx context.Context) (time.Time, bool, error) {
	var at string
	err := q.db.Read.QueryRowContext(ctx, `SELECT received_at FROM entries WHERE status = 'pending'
		ORDER BY queue_id LIMIT 1`).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	} else if err != nil {
		return time.Time{}, false, fmt.Errorf("oldest pending: %w", err)
	}
	t, err := touba.ParseTime(at)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("oldest pending: %w", err)
	}
	return t, true, nil
}
