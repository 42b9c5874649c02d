package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
)

// Durable steps on PostgreSQL (SPEC §2.3, touba.WaitStore): a waiting
// entry is a row in state waiting with no lease, its wait a row of
// touba.waits. Any node's Wake ends it (FOR UPDATE SKIP LOCKED: nodes
// waking at once share the work), so a dead node's sleeping entries wake
// elsewhere; intake matches waits in its own transaction
// (queue_waits_intake.go).

var _ touba.WaitStore = (*Queue)(nil)

// waitCols are a wait's columns, from alias w.
const waitCols = `w.queue_id, w.step_id, w.kind, w.key, w.value, w.wake_at, w.state, w.matched_queue_id,
	w.created_at, w.resolved_at`

// scanWait reads waitCols, any of them NULL (a LEFT JOIN that found no
// wait: ok false).
func scanWait(s scanner, extra ...any) (w touba.Wait, ok bool, err error) {
	var id, step, kind, key, value, state, created *string
	var wake, matched, resolved *string
	if err := s.Scan(append(extra, &id, &step, &kind, &key, &value, &wake, &state, &matched, &created, &resolved)...); err != nil {
		return w, false, err
	}
	if id == nil {
		return w, false, nil
	}
	w = touba.Wait{QueueID: *id, StepID: *step, Kind: *kind, Key: *key, Value: *value, State: *state}
	if matched != nil {
		w.MatchedQueueID = *matched
	}
	if w.CreatedAt, err = touba.ParseTime(*created); err != nil {
		return w, false, fmt.Errorf("wait %s/%s: created_at: %w", w.QueueID, w.StepID, err)
	}
	if w.WakeAt, err = parseOptional(wake); err != nil {
		return w, false, fmt.Errorf("wait %s/%s: wake_at: %w", w.QueueID, w.StepID, err)
	}
	if w.ResolvedAt, err = parseOptional(resolved); err != nil {
		return w, false, fmt.Errorf("wait %s/%s: resolved_at: %w", w.QueueID, w.StepID, err)
	}
	return w, true, nil
}

func parseOptional(s *string) (*time.Time, error) {
	if s == nil {
		return nil, nil
	}
	t, err := touba.ParseTime(*s)
	return &t, err
}

func formatOptional(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := touba.FormatTime(*t)
	return &s
}

// BeginWait begins w under the lease token (touba.WaitStore).
func (q *Queue) BeginWait(ctx context.Context, token int64, w touba.Wait) (touba.Wait, error) {
	if err := w.Check(); err != nil {
		return touba.Wait{}, err
	}
	if w.Kind == touba.WaitSleep {
		w.Key, w.Value = "", ""
	}
	var out touba.Wait
	err := q.change(w.QueueID, func(ctx context.Context, tx *Tx) error {
		var err error
		out, err = q.beginWait(ctx, tx, token, w)
		return err
	})
	if err != nil {
		return touba.Wait{}, fmt.Errorf("begin wait: %w", err)
	}
	return out, nil
}

// qBegin stores a new wait ($1 queue, $2 step, $3 kind, $4 key, $5 value,
// $6 wake_at, $7 now): an event wait first consumes the earliest
// unconsumed offer of (key, value) and is stored matched, the entry
// still running; otherwise it is stored open and the entry, its row
// locked by the fence, waits: lease ended, its attempt given back.
const qBegin = `WITH c AS (
	UPDATE touba.offers o SET consumed_by = $1
	FROM (SELECT queue_id, key FROM touba.offers WHERE $3 = 'event' AND key = $4 AND value = $5 AND consumed_by IS NULL
		ORDER BY created_at, queue_id LIMIT 1 FOR UPDATE) f
	WHERE o.queue_id = f.queue_id AND o.key = f.key AND o.consumed_by IS NULL
	RETURNING o.queue_id),
w AS (
	INSERT INTO touba.waits AS w (queue_id, step_id, kind, key, value, wake_at, state, matched_queue_id, created_at, resolved_at)
	SELECT $1, $2, $3, $4, $5, $6, CASE WHEN c.queue_id IS NULL THEN 'open' ELSE 'matched' END, c.queue_id, $7,
		CASE WHEN c.queue_id IS NULL THEN NULL ELSE $7 END
	FROM (SELECT 1) one LEFT JOIN c ON true
	RETURNING ` + waitCols + `),
e AS (
	UPDATE touba.entries SET status = 'waiting', wake_at = $6, attempts = GREATEST(attempts - 1, 0),
		lease_owner = NULL, lease_expires_at = NULL, not_before = NULL, updated_at = $7
	WHERE queue_id = $1 AND NOT EXISTS (SELECT 1 FROM c))
SELECT * FROM w`

func (q *Queue) beginWait(ctx context.Context, tx *Tx, token int64, w touba.Wait) (touba.Wait, error) {
	// An event wait takes its value's lock first, in a statement of its
	// own: the statements after it see every offer committed under it.
	// First, before the entry's row: intake, which may hold the lock in a
	// batch that also cancels this entry, never waits for it (it tries),
	// so a BeginWait waiting for the lock holds nothing intake waits for.
	// Then the fence: the entry is running under token, its lease live by
	// the database's clock, and its row locked until the batch ends, so
	// no take-over, cancel or other change commits in between. One round
	// trip for both.
	b := &pgx.Batch{}
	if w.Kind == touba.WaitEvent {
		b.Queue(lockValue, w.Key, w.Value)
	}
	b.Queue(`SELECT x.cancel_requested, x.trigger_ref, COALESCE(x.conc_key, ''), x.conc_max, `+waitCols+`
		FROM touba.entries x LEFT JOIN touba.waits w ON w.queue_id = x.queue_id AND w.step_id = $3
		WHERE x.queue_id = $1 AND x.lease_token = $2 AND x.status = 'running'
			AND x.lease_expires_at IS NOT NULL AND x.lease_expires_at >= `+q.db.dbNow()+`
		FOR UPDATE OF x`, w.QueueID, token, w.StepID)
	var cancel *string
	var ref, key string
	var n int
	var old touba.Wait
	var found bool
	br, err := tx.sendBatch(ctx, b)
	if err != nil {
		return touba.Wait{}, err
	}
	if w.Kind == touba.WaitEvent {
		if _, err = br.Exec(); err != nil {
			err = fmt.Errorf("lock wait value: %w", err)
		}
	}
	if err == nil {
		old, found, err = scanWait(br.QueryRow(), &cancel, &ref, &key, &n)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return touba.Wait{}, fenceLost(ctx, tx, w.QueueID, token)
	} else if err != nil {
		return touba.Wait{}, err
	}
	now := touba.FormatTime(q.db.cfg.Now())
	if cancel != nil {
		// Asked to cancel while it ran: it ends cancelled here, and
		// nothing of the wait is stored (a replay finds the step not yet
		// waited).
		if _, err := tx.Exec(ctx, `UPDATE touba.entries SET status = 'cancelled', error_code = '`+touba.ERunCancelled+`',
				error_message = cancel_requested, cancel_requested = NULL, lease_owner = NULL, lease_expires_at = NULL,
				not_before = NULL, wake_at = NULL, updated_at = $2 WHERE queue_id = $1`, w.QueueID, now); err != nil {
			return touba.Wait{}, err
		}
		if key != "" && n > 0 {
			if err := release(ctx, tx, ref, key, n); err != nil {
				return touba.Wait{}, err
			}
		}
		at, _ := touba.ParseTime(now)
		w.State, w.CreatedAt, w.ResolvedAt, w.MatchedQueueID = touba.WaitCancelled, at, &at, ""
		return w, nil
	}
	if found {
		return old, nil // the step began before: how it stands (or ended)
	}
	out, _, err := scanWait(tx.QueryRow(ctx, qBegin, w.QueueID, w.StepID, w.Kind, w.Key, w.Value, formatOptional(w.WakeAt), now))
	return out, err
}

// qWake wakes up to $2 entries due at $1: their open wait ends woke (a
// sleep) or timed_out (an event wait), the entry is pending.
const qWake = `WITH picked AS (
	SELECT e.queue_id, w.step_id, w.kind FROM touba.entries e
	JOIN touba.waits w ON w.queue_id = e.queue_id AND w.state = 'open'
	WHERE e.status = 'waiting' AND e.wake_at <= $1
	ORDER BY e.wake_at LIMIT $2 FOR UPDATE OF e, w SKIP LOCKED),
ended AS (
	UPDATE touba.waits w SET state = CASE WHEN p.kind = 'sleep' THEN 'woke' ELSE 'timed_out' END, resolved_at = $1
	FROM picked p WHERE w.queue_id = p.queue_id AND w.step_id = p.step_id)
UPDATE touba.entries e SET status = 'pending', wake_at = NULL, not_before = NULL, updated_at = $3
FROM picked p WHERE e.queue_id = p.queue_id`

// Wake moves the due waiting entries to pending (touba.WaitStore). Each
// entry and its open wait are locked with SKIP LOCKED: nodes waking at
// once take different entries, and an entry intake is matching or
// cancelling right now is left to it.
func (q *Queue) Wake(ctx context.Context, now time.Time, limit int) (int64, error) {
	if limit <= 0 {
		limit = 1000
	}
	n, err := q.execCount(qWake, touba.FormatTime(now), limit, q.db.now())
	if err != nil {
		return 0, fmt.Errorf("wake: %w", err)
	}
	return n, nil
}

// execCount runs one statement as a change of its own and returns the
// rows it changed.
func (q *Queue) execCount(query string, args ...any) (int64, error) {
	var n int64
	err := q.change("", func(ctx context.Context, tx *Tx) error {
		tag, err := tx.Exec(ctx, query, args...)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

// qNextWake is the soonest of the waits' and the open gatherings' times
// (queue_gather.go), each read through its own index.
const qNextWake = `SELECT LEAST(
	(SELECT wake_at FROM touba.entries WHERE status = 'waiting' AND wake_at IS NOT NULL ORDER BY wake_at LIMIT 1),
	(SELECT wake_at FROM touba.gatherings WHERE state = 'open' ORDER BY wake_at LIMIT 1))`

// NextWake is the earliest wake_at of a waiting entry or an open
// gathering (touba.WaitStore). The waiting entries are read above the
// lease's floor (queue_floor.go), which covers them.
func (q *Queue) NextWake(ctx context.Context) (time.Time, bool, error) {
	var at *string
	err := q.db.pool.QueryRow(ctx, bounded(qNextWake, q.boundNow(ctx))).Scan(&at)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next wake: %w", err)
	} else if at == nil {
		return time.Time{}, false, nil
	}
	t, err := touba.ParseTime(*at)
	return t, err == nil, err
}

const qWaits = `SELECT ` + waitCols + ` FROM touba.waits w WHERE w.queue_id = $1 OR w.matched_queue_id = $1
	ORDER BY w.created_at, w.queue_id, w.step_id`

// Waits lists the waits of queueID and those its delivery matched, oldest
// first (touba.WaitStore).
func (q *Queue) Waits(ctx context.Context, queueID string) ([]touba.Wait, error) {
	rows, err := q.db.pool.Query(ctx, qWaits, queueID)
	if err != nil {
		return nil, fmt.Errorf("waits of %s: %w", queueID, err)
	}
	defer rows.Close()
	var out []touba.Wait
	for rows.Next() {
		w, _, err := scanWait(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// CancelRequested reports whether a cancel_on match arrived for the entry
// while it ran (touba.WaitStore).
func (q *Queue) CancelRequested(ctx context.Context, queueID string) (bool, error) {
	var yes bool
	err := q.db.pool.QueryRow(ctx, `SELECT cancel_requested IS NOT NULL FROM touba.entries WHERE queue_id = $1`, queueID).Scan(&yes)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return yes, err
}

// EffectGens are the effect generations of an entry's steps
// (touba.WaitStore).
func (q *Queue) EffectGens(ctx context.Context, queueID string) (map[string]int, error) {
	var raw []byte
	err := q.db.pool.QueryRow(ctx, `SELECT effect_gens FROM touba.entries WHERE queue_id = $1`, queueID).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return map[string]int{}, nil
	} else if err != nil {
		return nil, fmt.Errorf("effect generations of %s: %w", queueID, err)
	}
	gens, err := decodeGens(raw)
	if err != nil {
		return nil, fmt.Errorf("effect generations of %s: %w", queueID, err)
	}
	return gens, nil
}

// decodeGens reads an entry's effect_gens: none when NULL.
func decodeGens(raw []byte) (map[string]int, error) {
	gens := map[string]int{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &gens); err != nil {
			return nil, err
		}
	}
	return gens, nil
}
