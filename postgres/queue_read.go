package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/internal/sqlwhere"
)

// Get returns one entry, or nil and no error when there is none.
func (q *Queue) Get(ctx context.Context, queueID string) (*touba.Delivery, error) {
	d, err := scanEntry(q.db.pool.QueryRow(ctx, `SELECT `+entryColumns+` FROM touba.entries WHERE queue_id = $1`, queueID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return d, err
}

// Detail returns the entry's error message, retry time and body size.
func (q *Queue) Detail(ctx context.Context, queueID string) (*touba.EntryDetail, error) {
	var msg, notBefore, routing *string
	var size *int64
	err := q.db.pool.QueryRow(ctx, `SELECT error_message, not_before, length(body)::bigint, routing FROM touba.entries WHERE queue_id = $1`,
		queueID).Scan(&msg, &notBefore, &size, &routing)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("entry %s: %w", queueID, err)
	}
	d := &touba.EntryDetail{BodyBytes: -1}
	if msg != nil {
		d.ErrorMessage = *msg
	}
	if size != nil {
		d.BodyBytes = *size
	}
	if notBefore != nil {
		t, err := touba.ParseTime(*notBefore)
		if err != nil {
			return nil, fmt.Errorf("entry %s: not_before: %w", queueID, err)
		}
		d.NotBefore = &t
	}
	if routing != nil {
		if d.Routing, err = touba.ParseRouting([]byte(*routing)); err != nil {
			return nil, fmt.Errorf("entry %s: routing: %w", queueID, err)
		}
	}
	return d, nil
}

// List returns entries in queue order (oldest first).
func (q *Queue) List(ctx context.Context, f touba.EntryFilter) ([]*touba.Delivery, error) {
	var where sqlwhere.Where
	where.Equal("status", f.Status)
	where.Equal("trigger_ref", f.TriggerRef)
	if f.Held {
		where.Add("status = 'pending' AND held")
	}
	if f.After != "" {
		where.Add("queue_id > ?", f.After)
	}
	order := ""
	if f.Newest {
		order = " DESC"
		if f.Before != "" {
			where.Add("queue_id < ?", f.Before)
		}
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	query := `SELECT ` + entryColumns + ` FROM touba.entries` + where.String() + ` ORDER BY queue_id` + order + ` LIMIT ?`
	rows, err := q.db.pool.Query(ctx, sqlwhere.Dollar(query), where.Args(f.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("list entries: %w", err)
	}
	defer rows.Close()
	var out []*touba.Delivery
	for rows.Next() {
		d, err := scanEntry(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// IDsByStatus lists queue ids in a state, optionally of one trigger.
func (q *Queue) IDsByStatus(ctx context.Context, status, triggerRef string) ([]string, error) {
	rows, err := q.db.pool.Query(ctx, `SELECT queue_id FROM touba.entries WHERE status = $1 AND ($2 = '' OR trigger_ref = $2)
		ORDER BY queue_id`, status, triggerRef)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// CountByStatus returns how many entries are in each state.
func (q *Queue) CountByStatus(ctx context.Context) (map[string]int64, error) {
	return countBy(ctx, q.db.pool, `SELECT status, COUNT(*) FROM touba.entries GROUP BY status`)
}

func countBy(ctx context.Context, db querier, query string) (map[string]int64, error) {
	rows, err := db.Query(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[s] = n
	}
	return out, rows.Err()
}

// OldestPending returns when the oldest pending entry was received.
func (q *Queue) OldestPending(ctx context.Context) (time.Time, bool, error) {
	var at string
	err := q.db.pool.QueryRow(ctx, `SELECT received_at FROM touba.entries WHERE status = 'pending' ORDER BY queue_id LIMIT 1`).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	} else if err != nil {
		return time.Time{}, false, fmt.Errorf("oldest pending: %w", err)
	}
	t, err := touba.ParseTime(at)
	return t, err == nil, err
}

// purgeChunk bounds one retention statement.
const purgeChunk = 500

// PurgeBodies drops the bodies and headers of entries done before cutoff
// (and of merged entries whose carrier is: its run read them), and their
// waits, offers and cancel keys; the rows (identities and digests) stay.
// A body a wait may still read is kept, by the rule --history keeps an
// entry by (unread): one matched by the wait of an unfinished entry, or
// holding an unconsumed offer for a trigger with unfinished entries (SPEC
// §2.3, issue 42).
func (q *Queue) PurgeBodies(ctx context.Context, cutoff time.Time) (int64, error) {
	return q.purgeChunks(ctx, "", touba.FormatTime(cutoff))
}

// purgeChunks purges, a chunk a transaction, the bodies PurgeBodies
// describes among the entries e for which where holds ("": every entry;
// its parameters from $3, args after before).
func (q *Queue) purgeChunks(ctx context.Context, where, before string, args ...any) (int64, error) {
	if where != "" {
		where += " AND "
	}
	args = append([]any{before, purgeChunk}, args...)
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		var n int64
		err := q.change("", func(ctx context.Context, tx *Tx) error {
			// JIT off: the statement's plan names every partition of entries
			// (an update, its pick and their subplans for each), past
			// jit_above_cost from a few dozen partitions on, and compiling it
			// took 16 s of a backend's CPU at 72 partitions against 25 ms to
			// run it without (EXPLAIN ANALYZE, issue 42): the first pass after
			// a start ran through a whole drain. SET LOCAL: the transaction's
			// other statements, if any, are OLTP ones too.
			if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
				return err
			}
			// The entries' waits, the offers they made or consumed and
			// their cancel keys go with their bodies: a done entry is never
			// cancelled, and a wait given its offer would find no body.
			err := tx.QueryRow(ctx, `WITH p AS (UPDATE touba.entries SET body = NULL, headers = '{}'
				WHERE queue_id IN (SELECT queue_id FROM touba.entries e
					WHERE `+where+`(status = 'done' OR status = 'merged' AND EXISTS (SELECT 1 FROM touba.entries c
					    WHERE c.queue_id = e.merged_into AND c.status = 'done' AND c.updated_at < $1))
					  AND updated_at < $1 AND body IS NOT NULL
					  AND `+unread(awaitedSQL)+`
					LIMIT $2 FOR UPDATE SKIP LOCKED)
				RETURNING queue_id),
			w AS (DELETE FROM touba.waits WHERE queue_id IN (SELECT queue_id FROM p)),
			o AS (DELETE FROM touba.offers WHERE queue_id IN (SELECT queue_id FROM p) OR consumed_by IN (SELECT queue_id FROM p)),
			c AS (DELETE FROM touba.cancel_keys WHERE queue_id IN (SELECT queue_id FROM p))
			SELECT COUNT(*) FROM p`, args...).Scan(&n)
			if n > 0 {
				crashpoint.Hit(CrashPurgeInChunk)
			}
			return err
		})
		if err != nil {
			return total, fmt.Errorf("purge bodies: %w", err)
		}
		total += n
		if n < purgeChunk {
			return total, nil
		}
	}
}

// RunRetention purges, now and then every quarter of retention (between a
// second and an hour), the bodies of entries done more than retention ago,
// each pass reading the entries that can hold what became purgeable since
// the last (purgePass). Every node runs it; SKIP LOCKED keeps them out of
// each other's way.
func (q *Queue) RunRetention(ctx context.Context, retention time.Duration, report func(purged int64, err error)) {
	if retention <= 0 {
		return
	}
	every := min(max(retention/4, time.Second), time.Hour)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		n, err := q.purgePass(ctx, q.db.cfg.Now().Add(-retention))
		if (n > 0 || err != nil) && ctx.Err() == nil && report != nil {
			report(n, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
