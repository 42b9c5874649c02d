package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
)

// Per-key concurrency (SPEC §2.1 `concurrency`), as in the SQLite queue
// (sqlite/queue/schema/0002_concurrency.sql): a pending entry is held while
// it is not among the first conc_max active entries of its key. Nodes
// decide it concurrently, so each decision first takes the key's
// transaction-level advisory lock: two nodes never both count a key's
// active entries below its max and both let an entry go. A key's active
// entries are its pending, running, waiting (a sleep or wait_for in
// progress holds its key) and parked ones. The statements
// after the lock run on a snapshot taken after it (READ COMMITTED, which
// the writer's transactions ask for), so they see every change made under
// the lock before. A key's order is conc_seq, drawn under that lock: the
// order its entries were accepted in, whichever node accepted them.

// lockKey takes the advisory lock of a key until the transaction ends.
func lockKey(ctx context.Context, tx *Tx, ref, key string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended(length($1) || ':' || $1 || $2, 7))`, ref, key)
	return err
}

// errRetry is a change that lost a deadlock to another node's batch (both
// waiting on key locks the other holds: a batch takes several keys' locks
// in the order its operations came). Its writes are undone; it is tried
// again in a new batch.
var errRetry = errors.New("deadlock with another node; tried again")

// deadlocked tells whether err is PostgreSQL breaking a deadlock (or a
// serialization failure, or a lock wait past lock_timeout: a lock held by
// a node frozen mid-transaction, until the server ends its session): the
// change may simply be tried again.
func deadlocked(err error) bool {
	var pe *pgconn.PgError
	return errors.Is(err, errRetry) || errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001" || pe.Code == "55P03")
}

// intakeLockWait bounds a lock wait of one keyed or durable delivery
// inside intake's batch (shortWait).
const intakeLockWait = 100 * time.Millisecond

// shortWait runs fn, one delivery's statements inside intake's shared
// batch, under a savepoint of its own with a short lock_timeout: a lock
// it meets held elsewhere (the identity another node is inserting in an
// open transaction, a row of the entry a cancel_on match ends) costs that
// delivery alone, undone and tried again shortly (errKeyBusy), instead of
// holding the batch for lock_timeout and then failing every delivery of
// it with the one that waited. Two round trips more, for keyed and
// durable deliveries only.
func shortWait(ctx context.Context, tx *Tx, fn func() error) error {
	if _, err := tx.Exec(ctx, fmt.Sprintf(`SAVEPOINT intake; SET LOCAL lock_timeout = %d`, intakeLockWait.Milliseconds())); err != nil {
		return err
	}
	if err := fn(); err != nil {
		// The savepoint's rollback also undoes its SET LOCAL.
		if _, rerr := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT intake; RELEASE SAVEPOINT intake`); rerr != nil {
			return fmt.Errorf("rollback to savepoint: %w (after %w)", rerr, err)
		}
		if lockWaited(err) {
			return errKeyBusy
		}
		return err
	}
	_, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d; RELEASE SAVEPOINT intake`, lockTimeout(tx.b.timeout).Milliseconds()))
	return err
}

// lockWaited tells whether err is a lock wait past lock_timeout.
func lockWaited(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}

// CrashKeyLocked is the crash point (internal/crashpoint) inside intake's
// transaction, just after a keyed delivery took its key's lock.
const CrashKeyLocked = "pg-enqueue-key-locked"

// maxTries bounds how often a change that lost a deadlock is tried again.
const maxTries = 5

// retried runs do, and again while it lost a deadlock (deadlocked: its
// transaction rolled back whole), maxTries times in all.
func retried(do func() error) error {
	for try := 1; ; try++ {
		err := do()
		if !deadlocked(err) || try == maxTries {
			return err
		}
	}
}

// errKeyBusy is a keyed delivery whose key another transaction holds.
var errKeyBusy = errors.New("key locked by another transaction")

// tryLockKey is lockKey inside intake's batch (DoShared, no savepoints):
// a free lock is taken at once; a held one is not waited for (errKeyBusy,
// nothing written): the batch carries every other delivery, and a wait
// here, on a node frozen mid-transaction say, would stall them all.
func tryLockKey(ctx context.Context, tx *Tx, ref, key string) error {
	var ok bool
	if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtextextended(length($1) || ':' || $1 || $2, 7))`, ref, key).
		Scan(&ok); err != nil {
		return err
	} else if !ok {
		return errKeyBusy
	}
	return nil
}

const activeOfKey = `SELECT COUNT(*) FROM (SELECT 1 FROM touba.entries
	WHERE trigger_ref = $1 AND conc_key = $2 AND status IN ('pending', 'running', 'waiting', 'parked') AND (status <> 'parked' OR error_code IS DISTINCT FROM 'ProgramChanged') LIMIT $3) a`

const releaseNext = `UPDATE touba.entries SET held = false WHERE held AND hold_on IS NULL AND queue_id IN (
	SELECT queue_id FROM touba.entries
	WHERE trigger_ref = $1 AND conc_key = $2 AND status IN ('pending', 'running', 'waiting', 'parked') AND (status <> 'parked' OR error_code IS DISTINCT FROM 'ProgramChanged')
	ORDER BY conc_seq LIMIT $3)`

const rehold = `UPDATE touba.entries SET held = NOT (queue_id IN (
		SELECT queue_id FROM touba.entries
		WHERE trigger_ref = $1 AND conc_key = $2 AND status IN ('pending', 'running', 'waiting', 'parked') AND (status <> 'parked' OR error_code IS DISTINCT FROM 'ProgramChanged')
		ORDER BY conc_seq LIMIT $3)
	  AND (SELECT COUNT(*) FROM touba.entries WHERE trigger_ref = $1 AND conc_key = $2
		AND (status IN ('running', 'waiting') OR status = 'pending' AND hold_on IS NOT NULL)) < $3)
	WHERE trigger_ref = $1 AND conc_key = $2 AND status = 'pending' AND hold_on IS NULL`

// enqueueKeyed decides and inserts one keyed delivery in tx.
func enqueueKeyed(ctx context.Context, tx *Tx, o *enqueueOp, now string) error {
	d := o.d
	if err := tryLockKey(ctx, tx, d.TriggerRef, d.ConcKey); err != nil {
		return err
	}
	if d.EventID != "" {
		if busy, err := tryLockIdentities(ctx, tx, []int32{identityKey(d.TriggerRef, d.EventID)}); err != nil {
			return err
		} else if len(busy) > 0 {
			return errKeyBusy
		}
	}
	crashpoint.Hit(CrashKeyLocked)
	var n int
	if err := tx.QueryRow(ctx, activeOfKey, d.TriggerRef, d.ConcKey, d.ConcMax).Scan(&n); err != nil {
		return fmt.Errorf("count active entries of key: %w", err)
	}
	body := d.Body
	if body == nil {
		body = []byte{}
	}
	var id string
	err := tx.QueryRow(ctx, `INSERT INTO touba.entries (queue_id, trigger_ref, event_id, digest, body, headers, remote_addr,
		received_at, status, updated_at, traceparent, conc_key, conc_max, held, conc_seq, program_digest, routing)
		SELECT $1, i.trigger_ref, i.event_id, $4, $5, $6, $7, $8, 'pending', $9, $10, $11, $12, $13, nextval('touba.conc_seqs'), $14,
			NULLIF($15, '')
		FROM (SELECT $2::text AS trigger_ref, $3::text AS event_id) i WHERE i.event_id = '' OR `+noOtherEntry+`
		ON CONFLICT DO NOTHING RETURNING queue_id`,
		d.QueueID, d.TriggerRef, d.EventID, d.Digest, body, o.headers, d.RemoteAddr, touba.FormatTime(d.ReceivedAt), now,
		d.TraceParent, d.ConcKey, d.ConcMax, n >= d.ConcMax, d.ProgramDigest, string(o.routing)).Scan(&id)
	if err == nil {
		o.res = touba.EnqueueResult{QueueID: d.QueueID, Created: true, Digest: d.Digest, Status: touba.StatusPending}
		return moveCursors(ctx, tx, []*enqueueOp{o})
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	ex, ok, err := lookup(ctx, tx, d)
	if err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("entry for %s/%s neither inserted nor found", d.TriggerRef, d.EventID)
	}
	o.res = ex
	return moveCursors(ctx, tx, []*enqueueOp{o})
}

// release lets the next entries of a key go after one left the active set.
func release(ctx context.Context, tx *Tx, ref, key string, max int) error {
	if err := lockKey(ctx, tx, ref, key); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, releaseNext, ref, key, max)
	return err
}

// reholdKey recomputes the held entries of queueID's key.
func reholdKey(ctx context.Context, tx *Tx, queueID string) error {
	var ref string
	var key *string
	var max int
	if err := tx.QueryRow(ctx, `SELECT trigger_ref, conc_key, conc_max FROM touba.entries WHERE queue_id = $1`, queueID).
		Scan(&ref, &key, &max); err != nil {
		return err
	}
	if key == nil || max <= 0 {
		return nil
	}
	if err := lockKey(ctx, tx, ref, *key); err != nil {
		return err
	}
	// Lease takes no key lock: wait for any lease of the key's pending
	// entries in flight, and keep them from being leased until this
	// commits, so the count of running entries below is the truth.
	if _, err := tx.Exec(ctx, `SELECT 1 FROM touba.entries WHERE trigger_ref = $1 AND conc_key = $2 AND status = 'pending'
		FOR UPDATE`, ref, *key); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, rehold, ref, *key, max)
	return err
}

// HeldKeys counts the keys that hold back at least one entry.
func (q *Queue) HeldKeys(ctx context.Context) (int64, error) {
	var n int64
	err := q.db.pool.QueryRow(ctx, `SELECT COUNT(*) FROM (SELECT DISTINCT trigger_ref, conc_key FROM touba.entries
		WHERE conc_key IS NOT NULL AND status = 'pending' AND held AND hold_on IS NULL) k`).Scan(&n)
	return n, err
}
