package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// Gatherings (touba.GatherStore, SPEC §2.1 debounce and batch): a created
// entry's Gather is applied in the transaction of its enqueue, after its
// offers and cancels. It finds the live gathering of its key through
// gatherings_open (one row at most) and is merged into it, or opens one
// and waits in it as its carrier. One writer runs every transaction of
// the file, so two deliveries of a key never both open a gathering, and a
// merge and the start of its gathering are ordered: a delivery never joins
// a gathering that started. The carrier's wake_at on entries stays NULL:
// the gathering's time is its own (gatherings_wake), read by NextWake and
// StartDue, so a release without gatherings never wakes a carrier.
//
// The bytes of the bodies a gathering holds (max_bytes, issue 43) are kept
// in its row's bytes column (0011_gather_bytes.sql), beside its size and
// moved in the same statement: summing the merged bodies at each merge
// would read every merged entry per delivery. A gathering opened by a
// release that kept no count (bytes NULL) has its bodies summed once, at
// its next merge.

// heldBytes is an open gathering's byte count: kept, or the bodies of
// carrier and its merged entries summed when none is kept.
func heldBytes(ctx context.Context, tx *sqlitex.Tx, carrier string, kept sql.NullInt64) (int64, error) {
	if kept.Valid {
		return kept.Int64, nil
	}
	var n int64
	err := tx.QueryRowContext(ctx, `SELECT coalesce(SUM(length(body)), 0) FROM entries
		WHERE queue_id = ?1 OR queue_id IN (SELECT queue_id FROM entries INDEXED BY entries_merged WHERE merged_into = ?1)`,
		carrier).Scan(&n)
	return n, err
}

var _ touba.GatherStore = (*Queue)(nil)

const (
	// qFindGathering: the open gathering of (trigger, key, value), and
	// whether its carrier still waits in it (live, touba.Gathering).
	qFindGathering = `SELECT g.carrier, g.size, g.bytes, g.wake_at, g.deadline, e.status = 'waiting' AND e.lease_token = 0
		FROM gatherings g JOIN entries e ON e.queue_id = g.carrier
		WHERE g.trigger_ref = ? AND g.key = ? AND g.value = ? AND g.state = 'open'`
	qMergeInto = `UPDATE gatherings SET size = ?, bytes = ?, last_at = ?, wake_at = ?, state = ?, started_at = ? WHERE carrier = ?`
	qMerged    = `UPDATE entries SET status = 'merged', merged_into = ?, merged_seq = ?, held = 0, updated_at = ?
		WHERE queue_id = ?`
	// qStartCarrier: a gathering started; its carrier is due at once.
	qStartCarrier  = `UPDATE entries SET status = 'pending', not_before = NULL, updated_at = ? WHERE queue_id = ? AND status = 'waiting'`
	qCloseDead     = `UPDATE gatherings SET state = 'closed' WHERE carrier = ? AND state = 'open'`
	qOpenGathering = `INSERT INTO gatherings (carrier, trigger_ref, kind, key, value, state, size, opened_at, last_at, wake_at, deadline, bytes)
		VALUES (?, ?, ?, ?, ?, 'open', 1, ?, ?, ?, ?, ?)`
	qCarry = `UPDATE entries SET status = 'waiting', wake_at = NULL, updated_at = ? WHERE queue_id = ?`
)

// gatherStmts are the statements of intake's gathering, prepared once
// with the writer's (queue.go).
var gatherStmts = []string{qFindGathering, qMergeInto, qMerged, qStartCarrier, qCloseDead, qOpenGathering, qCarry}

// gather applies the new entry d's Gather: merged into the live gathering
// of its key, or opening one. r says which.
func (q *Queue) gather(ctx context.Context, tx *sqlitex.Tx, d *touba.Delivery, r *Result) error {
	g := d.Gather
	now := q.opts.Now().UTC().Truncate(time.Millisecond)
	at := touba.FormatTime(now)
	var carrier, wakeS, deadlineS string
	var size int
	var kept sql.NullInt64
	var live bool
	err := tx.QueryRowContext(ctx, qFindGathering, d.TriggerRef, g.Key, g.Value).Scan(&carrier, &size, &kept, &wakeS, &deadlineS, &live)
	switch {
	case err == nil && live:
		held, err := heldBytes(ctx, tx, carrier, kept)
		if err != nil {
			return fmt.Errorf("gathering %s: %w", carrier, err)
		}
		m, err := g.Merge(now, size, held, int64(len(d.Body)), wakeS, deadlineS)
		if err != nil {
			return fmt.Errorf("gathering %s: %w", carrier, err)
		}
		state, started := touba.GatheringOpen, any(nil)
		if m.Started {
			state, started = touba.GatheringStarted, at
		}
		if _, err := tx.ExecContext(ctx, qMergeInto, m.Size, m.Bytes, at, touba.FormatTime(m.Wake), state, started, carrier); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, qMerged, carrier, m.Size, at, d.QueueID); err != nil {
			return err
		}
		q.batchMoved--
		r.Gather, r.Carrier, r.GatherWake = touba.GatherMerged, carrier, m.Wake
		if m.Started {
			res, err := tx.ExecContext(ctx, qStartCarrier, at, carrier)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 1 {
				q.batchMoved++
			}
			r.Gather = touba.GatherStarted
		}
		return nil
	case err == nil:
		// Dead: its carrier was cancelled or parked while it gathered.
		// Closed, so that this delivery opens the key's next one.
		if _, err := tx.ExecContext(ctx, qCloseDead, carrier); err != nil {
			return err
		}
	case !errors.Is(err, sql.ErrNoRows):
		return err
	}
	wake, deadline := g.Opened(now)
	if _, err := tx.ExecContext(ctx, qOpenGathering, d.QueueID, d.TriggerRef, g.Kind, g.Key, g.Value, at, at,
		touba.FormatTime(wake), touba.FormatTime(deadline), int64(len(d.Body))); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, qCarry, at, d.QueueID); err != nil {
		return err
	}
	q.batchMoved--
	r.Gather, r.Carrier, r.GatherWake = touba.GatherOpened, d.QueueID, wake
	return nil
}

// StartDue starts the open gatherings due at now, soonest first, at most
// limit of them: each live one's carrier goes to pending, each dead one
// is closed. It returns how many it started. The wake loop calls it with
// Wake.
func (q *Queue) StartDue(ctx context.Context, now time.Time, limit int) (int64, error) {
	if limit <= 0 {
		limit = 1000
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("start gatherings: %w", err)
	}
	due := touba.FormatTime(now)
	var n int64
	err := q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		ids, list, err := queryIDs(ctx, tx, `SELECT carrier FROM gatherings INDEXED BY gatherings_wake
			WHERE state = 'open' AND wake_at <= ? ORDER BY wake_at LIMIT ?`, due, limit)
		if err != nil || len(ids) == 0 {
			return 0, err
		}
		at := q.now()
		started, live, err := queryIDs(ctx, tx, `UPDATE entries SET status = 'pending', not_before = NULL, updated_at = ?
			WHERE queue_id IN (SELECT value FROM json_each(?)) AND status = 'waiting' AND lease_token = 0
			RETURNING queue_id`, at, list)
		if err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE gatherings SET
				state = CASE WHEN carrier IN (SELECT value FROM json_each(?2)) THEN 'started' ELSE 'closed' END,
				started_at = CASE WHEN carrier IN (SELECT value FROM json_each(?2)) THEN ?3 END
			WHERE carrier IN (SELECT value FROM json_each(?1))`, list, live, at); err != nil {
			return 0, err
		}
		n = int64(len(started))
		return n, nil
	})
	if err != nil {
		return 0, fmt.Errorf("start gatherings: %w", err)
	}
	return n, nil
}

const gatheringColumns = `g.carrier, g.trigger_ref, g.kind, g.key, g.value, g.state,
	g.state = 'open' AND e.status = 'waiting' AND e.lease_token = 0, g.size, g.opened_at, g.last_at, g.wake_at, g.deadline,
	g.started_at,
	coalesce(length(e.body), 0) + (SELECT coalesce(SUM(length(m.body)), 0) FROM entries m INDEXED BY entries_merged
		WHERE m.merged_into = g.carrier)`

// Gathering is the gathering carrier carries, nil when none.
func (q *Queue) Gathering(ctx context.Context, carrier string) (*touba.Gathering, error) {
	var g touba.Gathering
	var opened, last, wake, deadline string
	var started *string
	err := q.db.Read.QueryRowContext(ctx, `SELECT `+gatheringColumns+` FROM gatherings g JOIN entries e ON e.queue_id = g.carrier
		WHERE g.carrier = ?`, carrier).Scan(&g.Carrier, &g.TriggerRef, &g.Kind, &g.Key, &g.Value, &g.State, &g.Live,
		&g.Size, &opened, &last, &wake, &deadline, &started, &g.Bytes)
	if errors.Is(err, sql.ErrNoRows) {
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
	rows, err := q.db.Read.QueryContext(ctx, `SELECT `+entryColumns+` FROM entries INDEXED BY entries_merged
		WHERE merged_into = ? ORDER BY merged_seq`, carrier)
	if err != nil {
		return nil, fmt.Errorf("gathered into %s: %w", carrier, err)
	}
	defer rows.Close()
	out, err := scanEntries(rows)
	if err != nil {
		return nil, fmt.Errorf("gathered into %s: %w", carrier, err)
	}
	return out, nil
}

// GatheredAt is the entry merged into carrier at place seq, nil when none.
func (q *Queue) GatheredAt(ctx context.Context, carrier string, seq int) (*touba.Delivery, error) {
	rows, err := q.db.Read.QueryContext(ctx, `SELECT `+entryColumns+` FROM entries INDEXED BY entries_merged
		WHERE merged_into = ? AND merged_seq = ?`, carrier, seq)
	if err != nil {
		return nil, fmt.Errorf("gathered into %s at %d: %w", carrier, seq, err)
	}
	defer rows.Close()
	out, err := scanEntries(rows)
	if err != nil || len(out) == 0 {
		return nil, err
	}
	return out[0], nil
}

// rawBody scans an entry (entryColumns) with its body as the driver read
// it, not copied again: valid until the next row (EachGathered's fn).
type rawBody struct{ *sql.Rows }

func (r rawBody) Scan(dest ...any) error {
	body := dest[4].(*[]byte)
	var raw sql.RawBytes
	dest[4] = &raw
	if err := r.Rows.Scan(dest...); err != nil {
		return err
	}
	*body = raw
	return nil
}

// EachGathered calls fn with each entry merged into carrier, in merge
// order, one row at a time; each body is valid until fn returns.
func (q *Queue) EachGathered(ctx context.Context, carrier string, fn func(*touba.Delivery) error) error {
	rows, err := q.db.Read.QueryContext(ctx, `SELECT `+entryColumns+` FROM entries INDEXED BY entries_merged
		WHERE merged_into = ? ORDER BY merged_seq`, carrier)
	if err != nil {
		return fmt.Errorf("gathered into %s: %w", carrier, err)
	}
	defer rows.Close()
	for rows.Next() {
		d, err := scanEntry(rawBody{rows})
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
	err = q.db.Read.QueryRowContext(ctx, `SELECT
		(SELECT COUNT(*) FROM gatherings g JOIN entries e ON e.queue_id = g.carrier
		  WHERE g.state = 'open' AND e.status = 'waiting' AND e.lease_token = 0),
		(SELECT COUNT(*) FROM entries WHERE status = 'merged')`).Scan(&open, &merged)
	if err != nil {
		return 0, 0, fmt.Errorf("gather counts: %w", err)
	}
	return open, merged, nil
}
