package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// Waits of durable steps (touba.WaitStore, SPEC §2.3): BeginWait, Wake and
// the reads. A waiting entry holds nothing but its row: status 'waiting'
// with a wake_at that Wake reads through entries_wake, and its open wait
// in waits, which intake reads through waits_open (offers.go). Every change
// goes through the writer, so it is ordered with the enqueues that match
// waits and the transitions that end runs.

var _ touba.WaitStore = (*Queue)(nil)

const waitColumns = `queue_id, step_id, kind, key, value, wake_at, state, COALESCE(matched_queue_id, ''),
	created_at, resolved_at`

const (
	qEntryForWait = `SELECT status, lease_token, cancel_requested IS NOT NULL FROM entries WHERE queue_id = ?`
	qGetWait      = `SELECT ` + waitColumns + ` FROM waits WHERE queue_id = ? AND step_id = ?`
	qFirstOffer   = `SELECT seq, queue_id FROM offers WHERE key = ? AND value = ? AND consumed_by IS NULL
		ORDER BY seq LIMIT 1`
	qConsumeOffer = `UPDATE offers SET consumed_by = ? WHERE seq = ? AND consumed_by IS NULL`
	qInsertWait   = `INSERT INTO waits (queue_id, step_id, kind, key, value, wake_at, state, matched_queue_id, created_at, resolved_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''), ?, ?)`
	// qStartWaiting ends the lease and gives its attempt back, like
	// Postpone: a wait is no try.
	qStartWaiting = `UPDATE entries SET status = 'waiting', wake_at = ?, attempts = MAX(attempts - 1, 0),
		not_before = NULL, updated_at = ? WHERE queue_id = ? AND status = 'running' AND lease_token = ?`
	qWakeDue = `UPDATE entries SET status = 'pending', wake_at = NULL, not_before = NULL, updated_at = ?
		WHERE queue_id IN (SELECT queue_id FROM entries INDEXED BY entries_wake WHERE status = 'waiting' AND wake_at <= ?
		                   ORDER BY wake_at LIMIT ?)
		RETURNING queue_id`
	qEndWoken = `UPDATE waits SET state = CASE kind WHEN 'sleep' THEN 'woke' ELSE 'timed_out' END, resolved_at = ?
		WHERE state = 'open' AND queue_id IN (SELECT value FROM json_each(?))`
)

// BeginWait is touba.WaitStore's: under the lease token, return the step's
// wait if it has one, else consume the earliest unconsumed offer of an
// event wait, else store the wait open and move the entry to waiting.
func (q *Queue) BeginWait(ctx context.Context, token int64, w touba.Wait) (touba.Wait, error) {
	if err := w.Check(); err != nil {
		return touba.Wait{}, err
	}
	var out touba.Wait
	err := q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		var err error
		out, err = q.beginWait(ctx, tx, token, w)
		return 0, err
	})
	if err != nil {
		return touba.Wait{}, fmt.Errorf("begin wait %s/%s: %w", w.QueueID, w.StepID, err)
	}
	return out, nil
}

// beginWait is BeginWait in the writer, under the op's savepoint.
func (q *Queue) beginWait(ctx context.Context, tx *sqlitex.Tx, token int64, w touba.Wait) (touba.Wait, error) {
	var st string
	var cur int64
	var cancel bool
	err := tx.QueryRowContext(ctx, qEntryForWait, w.QueueID).Scan(&st, &cur, &cancel)
	if errors.Is(err, sql.ErrNoRows) {
		return touba.Wait{}, fmt.Errorf("entry %s: not running", w.QueueID)
	} else if err != nil {
		return touba.Wait{}, err
	}
	if err := notHeld(w.QueueID, token, st, cur); err != nil {
		return touba.Wait{}, err
	}
	now := q.opts.Now().UTC().Truncate(time.Millisecond)
	at := touba.FormatTime(now)
	if cancel {
		// Nothing stored: a replay must find the step not yet waited.
		if _, err := q.cancelIfRequested(ctx, tx, w.QueueID, token); err != nil {
			return touba.Wait{}, err
		}
		w.State, w.CreatedAt, w.ResolvedAt, w.MatchedQueueID = touba.WaitCancelled, now, &now, ""
		return w, nil
	}
	if got, err := scanWait(tx.QueryRowContext(ctx, qGetWait, w.QueueID, w.StepID)); err == nil {
		return *got, nil
	} else if !errors.Is(err, sql.ErrNoRows) {
		return touba.Wait{}, err
	}
	w.CreatedAt, w.ResolvedAt, w.MatchedQueueID = now, nil, ""
	if w.Kind == touba.WaitSleep {
		w.Key, w.Value = "", ""
	} else {
		var seq int64
		var from string
		err := tx.QueryRowContext(ctx, qFirstOffer, w.Key, w.Value).Scan(&seq, &from)
		if err == nil {
			if _, err := tx.ExecContext(ctx, qConsumeOffer, w.QueueID, seq); err != nil {
				return touba.Wait{}, err
			}
			w.State, w.MatchedQueueID, w.ResolvedAt = touba.WaitMatched, from, &now
			return w, insertWait(ctx, tx, w)
		} else if !errors.Is(err, sql.ErrNoRows) {
			return touba.Wait{}, err
		}
	}
	w.State = touba.WaitOpen
	if w.WakeAt != nil {
		t := w.WakeAt.UTC().Truncate(time.Millisecond)
		w.WakeAt = &t
	}
	if err := insertWait(ctx, tx, w); err != nil {
		return touba.Wait{}, err
	}
	if _, err := tx.ExecContext(ctx, qStartWaiting, timeOrNil(w.WakeAt), at, w.QueueID, token); err != nil {
		return touba.Wait{}, err
	}
	return w, nil
}

// queryIDs runs query, which returns queue ids, and returns them and
// their JSON list (what json_each reads).
func queryIDs(ctx context.Context, tx *sqlitex.Tx, query string, args ...any) ([]string, string, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, "", err
	}
	ids, err := scanIDs(rows)
	rows.Close()
	if err != nil {
		return nil, "", err
	}
	list, err := json.Marshal(ids)
	return ids, string(list), err
}

func insertWait(ctx context.Context, tx *sqlitex.Tx, w touba.Wait) error {
	_, err := tx.ExecContext(ctx, qInsertWait, w.QueueID, w.StepID, w.Kind, w.Key, w.Value, timeOrNil(w.WakeAt),
		w.State, w.MatchedQueueID, touba.FormatTime(w.CreatedAt), timeOrNil(w.ResolvedAt))
	return err
}

// Wake moves the waiting entries due at now to pending, soonest first, at
// most limit (default 1000) of them, and ends their open waits.
func (q *Queue) Wake(ctx context.Context, now time.Time, limit int) (int64, error) {
	if limit <= 0 {
		limit = 1000
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("wake: %w", err)
	}
	due := touba.FormatTime(now)
	var n int64
	err := q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		ids, list, err := queryIDs(ctx, tx, qWakeDue, q.now(), due, limit)
		if err != nil {
			return 0, err
		}
		n = int64(len(ids))
		if n == 0 {
			return 0, nil
		}
		if _, err := tx.ExecContext(ctx, qEndWoken, due, list); err != nil {
			return 0, err
		}
		return n, nil
	})
	if err != nil {
		return 0, fmt.Errorf("wake: %w", err)
	}
	return n, nil
}

// NextWake is the earliest wake_at of a waiting entry or an open
// gathering.
func (q *Queue) NextWake(ctx context.Context) (time.Time, bool, error) {
	var next sql.NullString
	// The soonest of the waits' and the gatherings' times (gather.go).
	err := q.db.Read.QueryRowContext(ctx, `SELECT MIN(w) FROM (
		SELECT (SELECT wake_at FROM entries INDEXED BY entries_wake WHERE status = 'waiting' AND wake_at IS NOT NULL
			ORDER BY wake_at LIMIT 1) AS w
		UNION ALL SELECT (SELECT wake_at FROM gatherings INDEXED BY gatherings_wake WHERE state = 'open'
			ORDER BY wake_at LIMIT 1))`).Scan(&next)
	if err == nil && !next.Valid {
		return time.Time{}, false, nil
	} else if err != nil {
		return time.Time{}, false, fmt.Errorf("next wake: %w", err)
	}
	t, err := touba.ParseTime(next.String)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next wake: %w", err)
	}
	return t, true, nil
}

// Waits lists the waits of queueID and those its delivery matched, oldest
// first.
func (q *Queue) Waits(ctx context.Context, queueID string) ([]touba.Wait, error) {
	rows, err := q.db.Read.QueryContext(ctx, `SELECT `+waitColumns+` FROM waits WHERE queue_id = ?
		UNION ALL SELECT `+waitColumns+` FROM waits WHERE matched_queue_id = ? AND queue_id != ?
		ORDER BY created_at, queue_id, step_id`, queueID, queueID, queueID)
	if err != nil {
		return nil, fmt.Errorf("waits of %s: %w", queueID, err)
	}
	defer rows.Close()
	out := []touba.Wait{}
	for rows.Next() {
		w, err := scanWait(rows)
		if err != nil {
			return nil, fmt.Errorf("waits of %s: %w", queueID, err)
		}
		out = append(out, *w)
	}
	return out, rows.Err()
}

// CancelRequested reports whether the entry was asked to cancel.
func (q *Queue) CancelRequested(ctx context.Context, queueID string) (bool, error) {
	var req bool
	err := q.db.Read.QueryRowContext(ctx, `SELECT cancel_requested IS NOT NULL FROM entries WHERE queue_id = ?`, queueID).Scan(&req)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("cancel requested of %s: %w", queueID, err)
	}
	return req, nil
}

func scanWait(s scanner) (*touba.Wait, error) {
	var w touba.Wait
	var wake, resolved sql.NullString
	var created string
	if err := s.Scan(&w.QueueID, &w.StepID, &w.Kind, &w.Key, &w.Value, &wake, &w.State, &w.MatchedQueueID,
		&created, &resolved); err != nil {
		return nil, err
	}
	var err error
	if w.CreatedAt, err = touba.ParseTime(created); err != nil {
		return nil, fmt.Errorf("wait %s/%s: created_at: %w", w.QueueID, w.StepID, err)
	}
	if w.WakeAt, err = parseNullTime(wake); err != nil {
		return nil, fmt.Errorf("wait %s/%s: wake_at: %w", w.QueueID, w.StepID, err)
	}
	if w.ResolvedAt, err = parseNullTime(resolved); err != nil {
		return nil, fmt.Errorf("wait %s/%s: resolved_at: %w", w.QueueID, w.StepID, err)
	}
	return &w, nil
}

func parseNullTime(s sql.NullString) (*time.Time, error) {
	if !s.Valid {
		return nil, nil
	}
	t, err := touba.ParseTime(s.String)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// timeOrNil is t stored: NULL for nil.
func timeOrNil(t *time.Time) any {
	if t == nil {
		return nil
	}
	return touba.FormatTime(*t)
}
