package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
)

// Intake's side of durable steps (SPEC §2.3): a delivery's Offers, Cancels
// and CancelKeys are applied in the transaction that stores it, only when
// it created an entry. A delivery with none of them takes the batched path
// of queue_enqueue.go unchanged: no statement more.
//
// An offer and a wait of one (key, value) never miss each other across
// nodes: intake and BeginWait both take the transaction-level advisory
// lock of (key, value) before reading the other side, in a statement of
// its own, so the statements after it (READ COMMITTED: a snapshot each)
// see whatever the other committed under the lock.

// valueLock is the advisory lock key of a (key, value) pair ($1, $2), in
// another space (seed) than the concurrency keys' (queue_concurrency.go).
const valueLock = `hashtextextended(length($1) || ':' || $1 || $2, 25)`

// lockValue takes the lock of (key, value) until the transaction ends,
// waiting for it (BeginWait, Resume: the queue's own changes, which a
// lock wait past lock_timeout or a deadlock only sends round again).
const lockValue = `SELECT pg_advisory_xact_lock(` + valueLock + `)`

// tryLockValues takes the locks of the offers' values, in sorted order,
// without waiting (intake's batch carries every other delivery, as for a
// concurrency key): errKeyBusy, nothing written, when one is held.
func tryLockValues(ctx context.Context, tx *Tx, offers []touba.MatchValue) error {
	sorted := slices.Clone(offers)
	slices.SortFunc(sorted, func(a, b touba.MatchValue) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return strings.Compare(a.Value, b.Value)
	})
	sorted = slices.Compact(sorted)
	keys, values := make([]string, len(sorted)), make([]string, len(sorted))
	for i, o := range sorted {
		keys[i], values[i] = o.Key, o.Value
	}
	var ok bool
	if err := tx.QueryRow(ctx, `SELECT bool_and(pg_try_advisory_xact_lock(hashtextextended(length(k) || ':' || k || v, 25)))
		FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(k, v, n)`, keys, values).Scan(&ok); err != nil {
		return fmt.Errorf("lock wait values: %w", err)
	} else if !ok {
		return errKeyBusy
	}
	return nil
}

// enqueueDurable decides and inserts one delivery carrying offers,
// cancels or cancel keys, in tx, and applies them when it created an
// entry. errKeyBusy: a lock it needs is held elsewhere, nothing written.
func enqueueDurable(ctx context.Context, tx *Tx, o *enqueueOp, keyed bool, clock time.Time) error {
	d := o.d
	now := touba.FormatTime(clock)
	if d.Gather != nil {
		// First, before any other lock: a gathering's deliveries all take
		// it first, and the ones after it are tried, never waited for.
		if err := tryLockGather(ctx, tx, d); err != nil {
			return err
		}
	}
	if len(d.Offers) > 0 {
		if err := tryLockValues(ctx, tx, d.Offers); err != nil {
			return err
		}
	}
	var err error
	if keyed {
		err = enqueueKeyed(ctx, tx, o, now)
	} else {
		if err = flushEnqueues(ctx, tx, []*enqueueOp{o}, now); err == nil && o.busy {
			return errKeyBusy // its identity is locked elsewhere: nothing written
		}
	}
	if err != nil || !o.res.Created {
		return err
	}
	if len(d.Offers) > 0 || len(d.Cancels) > 0 || len(d.CancelKeys) > 0 {
		if err := applyDurable(ctx, tx, o, now); err != nil {
			return err
		}
	}
	if d.Gather != nil {
		if err := gather(ctx, tx, o, clock); err != nil {
			return err
		}
	}
	if len(d.Routes) > 0 {
		return enqueueRoutes(ctx, tx, o, clock)
	}
	return nil
}

// qOffer is one offer of a new entry ($1): it matches the earliest open
// wait of (key $2, value $3), whose entry goes from waiting to pending,
// and is stored consumed by it, or unconsumed when none waits; its
// created_at is its acceptance ($4), the order BeginWait takes offers in.
const qOffer = `WITH w AS (
	SELECT queue_id, step_id FROM touba.waits WHERE key = $2 AND value = $3 AND state = 'open'
	ORDER BY created_at, queue_id LIMIT 1 FOR UPDATE),
m AS (
	UPDATE touba.waits x SET state = 'matched', matched_queue_id = $1, resolved_at = $4
	FROM w WHERE x.queue_id = w.queue_id AND x.step_id = w.step_id RETURNING x.queue_id),
e AS (
	UPDATE touba.entries x SET status = 'pending', wake_at = NULL, not_before = NULL, updated_at = $4
	FROM m WHERE x.queue_id = m.queue_id AND x.status = 'waiting' RETURNING x.queue_id)
INSERT INTO touba.offers (queue_id, key, value, created_at, consumed_by)
SELECT $1, $2, $3, $4, (SELECT queue_id FROM m)
RETURNING COALESCE(consumed_by, '')`

// qCancel is one cancel of a new entry: the pending and waiting entries
// holding the cancel key (key $1, value $2) end cancelled, the running
// ones are asked to (cancel_requested), in one statement, so an entry
// going from running to waiting meanwhile is seen in its new state. A
// parked one is asked too: its unknown write must still reach an
// operator, and once settled it ends cancelled (SPEC §2.3).
const qCancel = `UPDATE touba.entries x SET
	status = CASE WHEN x.status IN ('running', 'parked') THEN x.status ELSE 'cancelled' END,
	cancel_requested = CASE WHEN x.status IN ('running', 'parked') THEN COALESCE(x.cancel_requested, $3) END,
	error_code = CASE WHEN x.status IN ('running', 'parked') THEN x.error_code ELSE '` + touba.ERunCancelled + `' END,
	error_message = CASE WHEN x.status IN ('running', 'parked') THEN x.error_message ELSE $3 END,
	held = x.held AND x.status IN ('running', 'parked'),
	wake_at = NULL, not_before = CASE WHEN x.status IN ('running', 'parked') THEN x.not_before END, updated_at = $4
WHERE x.queue_id IN (SELECT queue_id FROM touba.cancel_keys WHERE key = $1 AND value = $2)
	AND x.status IN ('pending', 'waiting', 'running', 'parked')
RETURNING x.queue_id, x.status, x.trigger_ref, COALESCE(x.conc_key, ''), x.conc_max`

// qCancelWaits ends cancelled the open waits of the entries qCancel ended.
// A statement of its own, after it: its snapshot sees the wait of an entry
// whose BeginWait committed while qCancel waited for its row (qCancel's
// snapshot, older, does not), and the entries are locked by qCancel now.
const qCancelWaits = `UPDATE touba.waits w SET state = 'cancelled', resolved_at = $3
FROM touba.entries e
WHERE e.queue_id IN (SELECT queue_id FROM touba.cancel_keys WHERE key = $1 AND value = $2)
	AND e.status = 'cancelled' AND w.queue_id = e.queue_id AND w.state = 'open'`

// qLockCancelWaits locks the open waits of the entries holding the cancel
// key (key $1, value $2) before qCancel locks the entries: intake's offer
// (qOffer) locks a wait, then its entry, and a cancel taking them the
// other way round deadlocks with it (PostgreSQL then aborts one intake
// batch, every delivery in it).
const qLockCancelWaits = `SELECT COUNT(*) FROM (SELECT 1 FROM touba.waits w
	WHERE w.state = 'open' AND w.queue_id IN (SELECT queue_id FROM touba.cancel_keys WHERE key = $1 AND value = $2)
	ORDER BY w.queue_id, w.step_id FOR UPDATE OF w) l`

// applyDurable applies a new entry's offers, cancels and cancel keys, in
// one round trip (a pipeline), and lets the next entries of the keys its
// cancels freed go.
func applyDurable(ctx context.Context, tx *Tx, o *enqueueOp, now string) error {
	d := o.d
	b := &pgx.Batch{}
	// Cancels first: an entry this delivery cancels does not also take
	// its offer.
	if len(d.Cancels) > 0 {
		msg := touba.CancelledBy(d)
		for _, c := range d.Cancels {
			b.Queue(qLockCancelWaits, c.Key, c.Value)
			b.Queue(qCancel, c.Key, c.Value, msg, now)
			b.Queue(qCancelWaits, c.Key, c.Value, now)
		}
	}
	seen := map[string]bool{}
	var offers int
	for _, of := range d.Offers {
		if seen[of.Key] {
			continue // one value per wait key and delivery: the first
		}
		seen[of.Key] = true
		b.Queue(qOffer, d.QueueID, of.Key, of.Value, now)
		offers++
	}
	if n := len(d.CancelKeys); n > 0 {
		keys, values := make([]string, n), make([]string, n)
		for i, k := range d.CancelKeys {
			keys[i], values[i] = k.Key, k.Value
		}
		b.Queue(`INSERT INTO touba.cancel_keys (key, value, queue_id) SELECT k, v, $3 FROM unnest($1::text[], $2::text[]) AS t(k, v)
			ON CONFLICT DO NOTHING`, keys, values, d.QueueID)
	}
	br, err := tx.sendBatch(ctx, b)
	if err != nil {
		return err
	}
	type freed struct {
		ref, key string
		n        int
	}
	var free []freed
	err = func() error {
		defer br.Close()
		for range d.Cancels {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("lock waits to cancel: %w", err)
			}
			rows, err := br.Query()
			if err != nil {
				return fmt.Errorf("cancel: %w", err)
			}
			for rows.Next() {
				var id, st string
				var f freed
				if err := rows.Scan(&id, &st, &f.ref, &f.key, &f.n); err != nil {
					rows.Close()
					return fmt.Errorf("cancel: %w", err)
				}
				if !slices.Contains(o.res.Cancelled, id) {
					o.res.Cancelled = append(o.res.Cancelled, id)
				}
				if st == touba.StatusCancelled && f.key != "" && f.n > 0 && !slices.Contains(free, f) {
					free = append(free, f)
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("cancel: %w", err)
			}
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("cancel waits: %w", err)
			}
		}
		for range offers {
			var by string
			if err := br.QueryRow().Scan(&by); err != nil {
				return fmt.Errorf("offer: %w", err)
			}
			if by != "" && !slices.Contains(o.res.Matched, by) {
				o.res.Matched = append(o.res.Matched, by)
			}
		}
		if len(d.CancelKeys) > 0 {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("cancel keys: %w", err)
			}
		}
		return br.Close()
	}()
	if err != nil {
		return err
	}
	// A cancelled entry left its key's active set: the next ones go.
	for _, f := range free {
		if err := release(ctx, tx, f.ref, f.key, f.n); err != nil {
			return fmt.Errorf("release key %q of %s: %w", f.key, f.ref, err)
		}
	}
	return nil
}

// sendBatch sends b in the batch's transaction: one round trip, the
// transaction's BEGIN in it when b is its first statements
// (pipelineBegin).
func (t *Tx) sendBatch(ctx context.Context, b *pgx.Batch) (pgx.BatchResults, error) {
	if err := t.flushFirst(ctx); err != nil {
		return nil, err
	}
	if t.tx == nil {
		return t.pipelineBegin(ctx, b)
	}
	return t.tx.SendBatch(ctx, b), nil
}
