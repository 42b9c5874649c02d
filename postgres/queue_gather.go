package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
)

// Gatherings on PostgreSQL (touba.GatherStore, SPEC §2.1 debounce and
// batch), as in the SQLite queue (sqlite/queue/gather.go), across nodes.
// Intake gathers under the transaction-level advisory lock of the
// gathering's (trigger, key, value), tried without waiting like a
// concurrency key's: two nodes receiving deliveries of one key at once
// take turns, so they make one gathering, and each merge sees the one
// before it. The gathering's row is locked (FOR UPDATE) before it changes:
// StartDue, on any node, locks it too (SKIP LOCKED), so a delivery never
// joins a gathering that started, and a gathering starts once. Row locks
// are taken gathering first, then carrier, everywhere they are both taken;
// a cancel locks the carrier only and leaves the gathering dead (its
// carrier no longer waits in it), for the next delivery to close.

var _ touba.GatherStore = (*Queue)(nil)

// gatherLock is the advisory lock key of a gathering ($1 trigger, $2 key,
// $3 value), in a space (seed 36) of its own.
const gatherLock = `hashtextextended(length($1) || ':' || $1 || length($2) || ':' || $2 || $3, 36)`

// tryLockGather takes the gathering's lock without waiting: errKeyBusy,
// nothing written, when another transaction holds it.
func tryLockGather(ctx context.Context, tx *Tx, d *touba.Delivery) error {
	var ok bool
	if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(`+gatherLock+`)`, d.TriggerRef, d.Gather.Key, d.Gather.Value).
		Scan(&ok); err != nil {
		return fmt.Errorf("lock gathering: %w", err)
	} else if !ok {
		return errKeyBusy
	}
	return nil
}

// qFindGathering: the open gathering of (trigger, key, value), locked, and
// whether its carrier still waits in it.
const qFindGathering = `SELECT g.carrier, g.size, g.bytes, g.wake_at, g.deadline, e.status = 'waiting' AND e.lease_token = 0
	FROM touba.gatherings g JOIN touba.entries e ON e.queue_id = g.carrier
	WHERE g.trigger_ref = $1 AND g.key = $2 AND g.value = $3 AND g.state = 'open'
	FOR UPDATE OF g`

// gather applies the new entry's Gather, under tryLockGather: merged into
// the live gathering of its key, or opening one.
func gather(ctx context.Context, tx *Tx, o *enqueueOp, clock time.Time) error {
	d, g := o.d, o.d.Gather
	now := clock.UTC().Truncate(time.Millisecond)
	at := touba.FormatTime(now)
	var carrier, wakeS, deadlineS string
	var size int
	var kept *int64
	var live bool
	err := tx.QueryRow(ctx, qFindGathering, d.TriggerRef, g.Key, g.Value).Scan(&carrier, &size, &kept, &wakeS, &deadlineS, &live)
	switch {
	case err == nil && live:
		held, err := gatheringBytes(ctx, tx, carrier, kept)
		if err != nil {
			return fmt.Errorf("gathering %s: %w", carrier, err)
		}
		return merge(ctx, tx, o, carrier, size, held, wakeS, deadlineS, now)
	case err == nil:
		// Dead (its carrier was cancelled or parked): closed, so this
		// delivery opens the key's next gathering.
		if _, err := tx.Exec(ctx, `UPDATE touba.gatherings SET state = 'closed' WHERE carrier = $1 AND state = 'open'`, carrier); err != nil {
			return fmt.Errorf("close gathering %s: %w", carrier, err)
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("find gathering: %w", err)
	}
	wake, deadline := g.Opened(now)
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO touba.gatherings (carrier, trigger_ref, kind, key, value, state, size, opened_at, last_at, wake_at, deadline, bytes)
		VALUES ($1, $2, $3, $4, $5, 'open', 1, $6, $6, $7, $8, $9)`, d.QueueID, d.TriggerRef, g.Kind, g.Key, g.Value, at,
		touba.FormatTime(wake), touba.FormatTime(deadline), int64(len(d.Body)))
	b.Queue(`UPDATE touba.entries SET status = 'waiting', wake_at = NULL, updated_at = $2 WHERE queue_id = $1`, d.QueueID, at)
	if err := tx.execBatch(ctx, b); err != nil {
		return fmt.Errorf("open gathering: %w", err)
	}
	o.res.Gather, o.res.Carrier, o.res.GatherWake = touba.GatherOpened, d.QueueID, wake
	return nil
}

// gatheringBytes is an open gathering's byte count (max_bytes, issue 43):
// kept in its row's bytes column, moved with its size by each merge, or
// the bodies of carrier and its merged entries summed when none is kept
// (bytes NULL: a gathering opened by a release that kept none).
func gatheringBytes(ctx context.Context, tx *Tx, carrier string, kept *int64) (int64, error) {
	if kept != nil {
		return *kept, nil
	}
	var n int64
	err := tx.QueryRow(ctx, `SELECT coalesce(sum(octet_length(body)), 0)::bigint FROM touba.entries
		WHERE queue_id = $1 OR merged_into = $1`, carrier).Scan(&n)
	return n, err
}

// merge merges the new entry into carrier's gathering (locked), which held
// size deliveries and held bytes of bodies, and starts it when that fills
// it.
func merge(ctx context.Context, tx *Tx, o *enqueueOp, carrier string, size int, held int64, wakeS, deadlineS string, now time.Time) error {
	d, g := o.d, o.d.Gather
	m, err := g.Merge(now, size, held, int64(len(d.Body)), wakeS, deadlineS)
	if err != nil {
		return fmt.Errorf("gathering %s: %w", carrier, err)
	}
	at := touba.FormatTime(now)
	state, started := touba.GatheringOpen, (*string)(nil)
	if m.Started {
		state, started = touba.GatheringStarted, &at
	}
	b := &pgx.Batch{}
	b.Queue(`UPDATE touba.gatherings SET size = $2, last_at = $3, wake_at = $4, state = $5, started_at = $6, bytes = $7 WHERE carrier = $1`,
		carrier, m.Size, at, touba.FormatTime(m.Wake), state, started, m.Bytes)
	b.Queue(`UPDATE touba.entries SET status = 'merged', merged_into = $2, merged_seq = $3, held = false, updated_at = $4
		WHERE queue_id = $1`, d.QueueID, carrier, m.Size, at)
	if m.Started {
		b.Queue(`UPDATE touba.entries SET status = 'pending', not_before = NULL, updated_at = $2 WHERE queue_id = $1 AND status = 'waiting'`,
			carrier, at)
	}
	if err := tx.execBatch(ctx, b); err != nil {
		return fmt.Errorf("merge into %s: %w", carrier, err)
	}
	o.res.Gather, o.res.Carrier, o.res.GatherWake = touba.GatherMerged, carrier, m.Wake
	if m.Started {
		o.res.Gather = touba.GatherStarted
	}
	return nil
}

// execBatch runs b's statements in the batch's transaction, one round trip.
func (t *Tx) execBatch(ctx context.Context, b *pgx.Batch) error {
	br, err := t.sendBatch(ctx, b)
	if err != nil {
		return err
	}
	for range b.Len() {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return err
		}
	}
	return br.Close()
}

// qStartDue starts up to $2 gatherings due at $1: each is locked (SKIP
// LOCKED: one intake is merging into it, or another node is starting it)
// with its carrier; a live one's carrier goes to pending, a dead one is
// closed.
const qStartDue = `WITH picked AS (
	SELECT g.carrier, e.status = 'waiting' AND e.lease_token = 0 AS live
	FROM touba.gatherings g JOIN touba.entries e ON e.queue_id = g.carrier
	WHERE g.state = 'open' AND g.wake_at <= $1
	ORDER BY g.wake_at LIMIT $2 FOR UPDATE OF g, e SKIP LOCKED),
ended AS (
	UPDATE touba.gatherings g SET state = CASE WHEN p.live THEN 'started' ELSE 'closed' END,
		started_at = CASE WHEN p.live THEN $3 END
	FROM picked p WHERE g.carrier = p.carrier)
UPDATE touba.entries e SET status = 'pending', not_before = NULL, updated_at = $3
FROM picked p WHERE e.queue_id = p.carrier AND p.live`

// StartDue starts the gatherings due at now (touba.GatherStore).
func (q *Queue) StartDue(ctx context.Context, now time.Time, limit int) (int64, error) {
	if limit <= 0 {
		limit = 1000
	}
	n, err := q.execCount(qStartDue, touba.FormatTime(now), limit, q.db.now())
	if err != nil {
		return 0, fmt.Errorf("start gatherings: %w", err)
	}
	return n, nil
}
