package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
)

// The reads of gatherings (touba.GatherStore): `queue show` of a carrier,
// the run's /events, and the metrics' counts.

// Gathering is the gathering carrier carries, nil when none.
func (q *Queue) Gathering(ctx context.Context, carrier string) (*touba.Gathering, error) {
	var g touba.Gathering
	var opened, last, wake, deadline string
	var started *string
	err := q.db.pool.QueryRow(ctx, `SELECT g.carrier, g.trigger_ref, g.kind, g.key, g.value, g.state,
			g.state = 'open' AND e.status = 'waiting' AND e.lease_token = 0, g.size, g.opened_at, g.last_at, g.wake_at,
			g.deadline, g.started_at,
			coalesce(octet_length(e.body), 0) + (SELECT coalesce(sum(octet_length(m.body)), 0) FROM touba.entries m
				WHERE m.merged_into = g.carrier)::bigint
		FROM touba.gatherings g JOIN touba.entries e ON e.queue_id = g.carrier WHERE g.carrier = $1`, carrier).
		Scan(&g.Carrier, &g.TriggerRef, &g.Kind, &g.Key, &g.Value, &g.State, &g.Live, &g.Size, &opened, &last, &wake,
			&deadline, &started, &g.Bytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("gathering of %s: %w", carrier, err)
	}
	if err := g.SetTimes(opened, last, wake, deadline, started); err != nil {
		return nil, fmt.Errorf("gathering of %s: %w", carrier, err)
	}
	return &g, nil
}

// Gathered lists the entries merged into carrier, in merge order.
func (q *Queue) Gathered(ctx context.Context, carrier string) ([]*touba.Delivery, error) {
	rows, err := q.db.pool.Query(ctx, `SELECT `+entryColumns+` FROM touba.entries WHERE merged_into = $1 ORDER BY merged_seq`, carrier)
	if err != nil {
		return nil, fmt.Errorf("gathered into %s: %w", carrier, err)
	}
	defer rows.Close()
	var out []*touba.Delivery
	for rows.Next() {
		d, err := scanEntry(rows)
		if err != nil {
			return nil, fmt.Errorf("gathered into %s: %w", carrier, err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// GatheredAt is the entry merged into carrier at place seq, nil when none.
func (q *Queue) GatheredAt(ctx context.Context, carrier string, seq int) (*touba.Delivery, error) {
	rows, err := q.db.pool.Query(ctx, `SELECT `+entryColumns+` FROM touba.entries WHERE merged_into = $1 AND merged_seq = $2`,
		carrier, seq)
	if err != nil {
		return nil, fmt.Errorf("gathered into %s at %d: %w", carrier, seq, err)
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, rows.Err()
	}
	d, err := scanEntry(rows)
	if err != nil {
		return nil, fmt.Errorf("gathered into %s at %d: %w", carrier, seq, err)
	}
	return d, nil
}

// EachGathered calls fn with each entry merged into carrier, in merge
// order, one row at a time.
func (q *Queue) EachGathered(ctx context.Context, carrier string, fn func(*touba.Delivery) error) error {
	rows, err := q.db.pool.Query(ctx, `SELECT `+entryColumns+` FROM touba.entries WHERE merged_into = $1 ORDER BY merged_seq`, carrier)
	if err != nil {
		return fmt.Errorf("gathered into %s: %w", carrier, err)
	}
	defer rows.Close()
	for rows.Next() {
		d, err := scanEntry(rows)
		if err != nil {
			return fmt.Errorf("gathered into %s: %w", carrier, err)
		}
		if err := fn(d); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("gathered into %s: %w", carrier, err)
	}
	return nil
}

// GatherCounts counts the live gatherings and the merged entries.
func (q *Queue) GatherCounts(ctx context.Context) (open, merged int64, err error) {
	err = q.db.pool.QueryRow(ctx, `SELECT
		(SELECT COUNT(*) FROM touba.gatherings g JOIN touba.entries e ON e.queue_id = g.carrier
		  WHERE g.state = 'open' AND e.status = 'waiting' AND e.lease_token = 0),
		(SELECT COUNT(*) FROM touba.entries WHERE status = 'merged')`).Scan(&open, &merged)
	if err != nil {
		return 0, 0, fmt.Errorf("gather counts: %w", err)
	}
	return open, merged, nil
}
