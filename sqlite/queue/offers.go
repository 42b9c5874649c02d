package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// Intake's side of durable steps (touba.WaitStore, SPEC §2.3): a created
// entry's Offers, Cancels and CancelKeys are applied in the transaction of
// its enqueue, so a match or a cancel commits with the delivery that made
// it, or not at all. One writer runs every transaction of the file, so an
// offer and a BeginWait of the same (key, value) are ordered: whichever
// commits second sees the other.
//
// Enqueue runs shared (no savepoint): every statement here writes or
// precedes a write, so an error is the batch's, never the enqueue's own.
// The statements are prepared once with the writer's (durableStmts): a
// statement prepared per use cost an enqueue with match values more than
// all its statements' work.

const (
	qOpenWait = `SELECT queue_id, step_id FROM waits WHERE key = ? AND value = ? AND state = 'open'
		ORDER BY created_at, queue_id LIMIT 1`
	qMatchWait = `UPDATE waits SET state = 'matched', matched_queue_id = ?, resolved_at = ?
		WHERE queue_id = ? AND step_id = ? AND state = 'open'`
	// qWakeMatched: the waiter goes back to pending, due at once; it keeps
	// its place in its key's line (held stays 0: it held a slot).
	qWakeMatched = `UPDATE entries SET status = 'pending', wake_at = NULL, not_before = NULL, updated_at = ?
		WHERE queue_id = ? AND status = 'waiting'`
	qInsertOffer = `INSERT INTO offers (key, value, queue_id, consumed_by, created_at) VALUES (?, ?, ?, ?, ?)`
	qCancelable  = `SELECT e.queue_id, e.status, e.trigger_ref, e.conc_key, e.conc_max
		FROM cancel_keys c JOIN entries e ON e.queue_id = c.queue_id
		WHERE c.key = ? AND c.value = ? AND c.queue_id != ? AND e.status IN ('pending', 'waiting', 'running', 'parked')`
	// qCancelIdle ends a pending or waiting entry cancelled.
	qCancelIdle = `UPDATE entries SET status = 'cancelled', error_code = '` + touba.ERunCancelled + `', error_message = ?,
		wake_at = NULL, not_before = NULL, updated_at = ? WHERE queue_id = ? AND status IN ('pending', 'waiting')`
	qCancelWaits = `UPDATE waits SET state = 'cancelled', resolved_at = ? WHERE queue_id = ? AND state = 'open'`
	// qRequestCancel asks a running entry to cancel, or a parked one (its
	// unknown write must still reach an operator; once settled it ends
	// cancelled); the first request's message is kept.
	qRequestCancel = `UPDATE entries SET cancel_requested = COALESCE(cancel_requested, ?)
		WHERE queue_id = ? AND status IN ('running', 'parked')`
	qInsertCancelKey = `INSERT INTO cancel_keys (key, value, queue_id) VALUES (?, ?, ?)`
)

// applyMatches applies d's Cancels, then its Offers, then stores its
// CancelKeys, and says in r what it matched and cancelled. Cancels go
// first: an entry this delivery cancels does not also take its offer. The
// new entry never cancels itself.
func (q *Queue) applyMatches(ctx context.Context, tx *sqlitex.Tx, d *touba.Delivery, r *Result) error {
	now := q.batchTime()
	if len(d.Cancels) > 0 {
		msg := touba.CancelledBy(d)
		for _, c := range d.Cancels {
			if err := q.cancelByKey(ctx, tx, c, d.QueueID, msg, now, r); err != nil {
				return fmt.Errorf("cancel %s: %w", c.Key, err)
			}
		}
	}
	for _, o := range d.Offers {
		if err := q.offer(ctx, tx, o, d.QueueID, now, r); err != nil {
			return fmt.Errorf("offer %s: %w", o.Key, err)
		}
	}
	for _, k := range d.CancelKeys {
		if _, err := tx.ExecContext(ctx, qInsertCancelKey, k.Key, k.Value, d.QueueID); err != nil {
			return fmt.Errorf("cancel key %s: %w", k.Key, err)
		}
	}
	return nil
}

// offer matches the earliest open wait of (o.Key, o.Value), whose entry
// goes back to pending, or stores the offer for a later wait.
func (q *Queue) offer(ctx context.Context, tx *sqlitex.Tx, o touba.MatchValue, from, now string, r *Result) error {
	var waiter, step string
	err := tx.QueryRowContext(ctx, qOpenWait, o.Key, o.Value).Scan(&waiter, &step)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = tx.ExecContext(ctx, qInsertOffer, o.Key, o.Value, from, nil, now)
		return err
	} else if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, qMatchWait, from, now, waiter, step); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, qWakeMatched, now, waiter)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		q.batchMoved++
	}
	if _, err := tx.ExecContext(ctx, qInsertOffer, o.Key, o.Value, from, waiter, now); err != nil {
		return err
	}
	r.Matched = append(r.Matched, waiter)
	return nil
}

// cancelByKey ends the entries holding cancel key c: pending and waiting
// ones cancelled now (their open wait with them, their concurrency key
// released), running ones asked to cancel at their next transition and
// parked ones once an operator settles them.
func (q *Queue) cancelByKey(ctx context.Context, tx *sqlitex.Tx, c touba.MatchValue, self, msg, now string, r *Result) error {
	type hit struct {
		id, status, ref string
		key             sql.NullString
		max             int
	}
	rows, err := tx.QueryContext(ctx, qCancelable, c.Key, c.Value, self)
	if err != nil {
		return err
	}
	var hits []hit
	for rows.Next() {
		var h hit
		if err := rows.Scan(&h.id, &h.status, &h.ref, &h.key, &h.max); err != nil {
			rows.Close()
			return err
		}
		hits = append(hits, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	// In queue order, sorted here: no ORDER BY, no sorter for the usual
	// none or one.
	sort.Slice(hits, func(i, j int) bool { return hits[i].id < hits[j].id })
	for _, h := range hits {
		if h.status == touba.StatusRunning || h.status == touba.StatusParked {
			if _, err := tx.ExecContext(ctx, qRequestCancel, msg, h.id); err != nil {
				return err
			}
		} else {
			if _, err := tx.ExecContext(ctx, qCancelIdle, msg, now, h.id); err != nil {
				return err
			}
			if h.status == touba.StatusPending {
				q.batchMoved--
			} else if _, err := tx.ExecContext(ctx, qCancelWaits, now, h.id); err != nil {
				return err
			}
			if h.key.Valid && h.max > 0 {
				if _, err := tx.ExecContext(ctx, releaseNext, h.ref, h.key.String, h.max); err != nil {
					return err
				}
			}
		}
		if !slices.Contains(r.Cancelled, h.id) {
			r.Cancelled = append(r.Cancelled, h.id)
		}
	}
	return nil
}

// durableStmts are the statements of durable steps the writer prepares
// once (queue.go): intake's here, BeginWait's and Wake's (waits.go), and
// the cancel of a running entry (lease.go).
var durableStmts = []string{qOpenWait, qMatchWait, qWakeMatched, qInsertOffer, qCancelable, qCancelIdle, qCancelWaits,
	qRequestCancel, qInsertCancelKey, qEntryForWait, qGetWait, qFirstOffer, qConsumeOffer, qInsertWait, qStartWaiting,
	qWakeDue, qEndWoken, qCancelRunning}
