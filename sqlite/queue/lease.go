package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/commit"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// RequeueRunning puts entries left running by a crash back to pending
// (SPEC §3.2). It must run before the first Lease.
func (q *Queue) RequeueRunning(ctx context.Context) (int64, error) {
	if q.w == nil {
		return 0, sqlitex.ErrReadOnly
	}
	res, err := q.db.Write.ExecContext(ctx, `UPDATE entries SET status = 'pending', not_before = NULL, updated_at = ?
		WHERE status = 'running'`, q.now())
	if err != nil {
		return 0, fmt.Errorf("requeue running: %w", err)
	}
	n, _ := res.RowsAffected()
	q.pending.Add(n)
	return n, nil
}

// Lease moves up to n due pending entries to running, oldest first, and
// returns them with their attempt count already incremented. It runs in
// the writer's next batch rather than in a transaction of its own: the
// lease shares the commit (and the fsync) of the Finish calls queued
// before it, and sees the entries they released (per-key ordering), so a
// released entry is leased in the same round instead of the next.
func (q *Queue) Lease(ctx context.Context, n int) ([]*touba.Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	now := q.now()
	var out []*touba.Delivery
	// Isolated under the op's savepoint: UPDATE ... RETURNING changes every
	// row before the first is read, so a failure while reading must undo it
	// all rather than leave entries running that nobody runs.
	err := q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		out = out[:0]
		if q.paused.Load() > 0 {
			var err error
			out, err = q.leaseAround(ctx, tx, now, n)
			return -int64(len(out)), err
		}
		rows, err := tx.QueryContext(ctx, qLease, now, now, n)
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		if out, err = scanEntries(rows); err != nil {
			return 0, err
		}
		return -int64(len(out)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	return out, nil
}

// qLease takes the oldest due entries that no earlier entry of their key
// holds back (entries_ready), skipping paused triggers (holds.go).
const qLease = `UPDATE entries SET status = 'running', attempts = attempts + 1, lease_token = lease_token + 1, updated_at = ?
	WHERE queue_id IN (SELECT queue_id FROM entries e WHERE status = 'pending' AND held = 0
	                     AND (not_before IS NULL OR not_before <= ?) AND hold_on IS NULL
	                     AND NOT EXISTS (SELECT 1 FROM paused_triggers p WHERE p.trigger_ref = e.trigger_ref)
	                   ORDER BY queue_id LIMIT ?)
	RETURNING ` + entryColumns

// The dispatcher's transitions of an entry, prepared once on the writer
// connection (sqlitex.Tx): one of them ends every run. Those that an
// entry asked to cancel may not take (Retry, Postpone, Finish failed) say
// so in their guard, so the common case stays one statement: when the
// guard refuses, cancelIfRequested ends the entry cancelled instead.
const (
	qFinish = finishEntry + ` RETURNING trigger_ref, conc_key, conc_max`
	// qFinishUnkeyed is qFinish for an entry without a concurrency key, the
	// common case: nothing to release, so no RETURNING (SQLite keeps the
	// rows it returns in a table of their own until the statement ends).
	qFinishUnkeyed = finishEntry + ` AND conc_key IS NULL`
	// qFail and qFailUnkeyed are Finish failed: not for an entry asked to
	// cancel, which ends cancelled.
	qFail        = finishEntry + ` AND cancel_requested IS NULL RETURNING trigger_ref, conc_key, conc_max`
	qFailUnkeyed = finishEntry + ` AND cancel_requested IS NULL AND conc_key IS NULL`
	finishEntry  = `UPDATE entries SET status = ?, error_code = NULLIF(?, ''), error_message = NULLIF(?, ''),
		not_before = NULL, updated_at = ? WHERE queue_id = ? AND status = 'running' AND lease_token = ?`
	qRetry = `UPDATE entries SET status = 'pending', error_code = NULLIF(?, ''), error_message = NULLIF(?, ''),
		not_before = ?, updated_at = ? WHERE queue_id = ? AND status = 'running' AND lease_token = ? AND cancel_requested IS NULL`
	qPostpone = `UPDATE entries SET status = 'pending', attempts = MAX(attempts - 1, 0),
		error_code = NULLIF(?, ''), error_message = NULLIF(?, ''), not_before = ?, updated_at = ?
		WHERE queue_id = ? AND status = 'running' AND lease_token = ? AND cancel_requested IS NULL`
	// qCancelRunning ends a running entry asked to cancel: its message is
	// the request's (it names the cancelling delivery).
	qCancelRunning = `UPDATE entries SET status = 'cancelled', error_code = '` + touba.ERunCancelled + `',
		error_message = cancel_requested, not_before = NULL, wake_at = NULL, updated_at = ?
		WHERE queue_id = ? AND status = 'running' AND lease_token = ? AND cancel_requested IS NOT NULL
		RETURNING trigger_ref, conc_key, conc_max`
)

// Finish ends a running entry as done, failed, parked or cancelled (the
// dispatcher saw CancelRequested). It is durable when it returns;
// concurrent calls share commits. An entry asked to cancel that would end
// failed ends cancelled; done stays done (it completed) and parked stays
// parked (an unknown outcome must still reach an operator).
func (q *Queue) Finish(ctx context.Context, queueID string, token int64, status, code, message string) error {
	switch status {
	case touba.StatusDone, touba.StatusFailed, touba.StatusParked, touba.StatusCancelled:
	default:
		return fmt.Errorf("finish %s: bad status %q", queueID, status)
	}
	return q.finishAndRelease(queueID, token, status, status, code, message, q.now(), queueID, token)
}

// Retry puts a running entry back to pending, due at notBefore.
func (q *Queue) Retry(ctx context.Context, queueID string, token int64, notBefore time.Time, code, message string) error {
	return q.transition(queueID, token, 1, qRetry, code, message, touba.FormatTime(notBefore), q.now(), queueID, token)
}

// Postpone puts a running entry back to pending, due at notBefore, and
// gives back the attempt its lease counted: the run could not start (its
// effect was held elsewhere, a file did not answer), which is no try.
func (q *Queue) Postpone(ctx context.Context, queueID string, token int64, notBefore time.Time, code, message string) error {
	return q.transition(queueID, token, 1, qPostpone, code, message, touba.FormatTime(notBefore), q.now(), queueID, token)
}

// Renew checks that the caller still holds the lease: leases of the queue
// file never expire (one process owns it), so there is nothing to extend.
func (q *Queue) Renew(ctx context.Context, queueID string, token int64) error {
	var st string
	var cur int64
	err := q.db.Read.QueryRowContext(ctx, `SELECT status, lease_token FROM entries WHERE queue_id = ?`, queueID).Scan(&st, &cur)
	if err != nil {
		return fmt.Errorf("renew lease of %s: %w", queueID, err)
	}
	return notHeld(queueID, token, st, cur)
}

// notHeld explains a guarded change that matched no row: LeaseLost when
// the entry was leased again under another token, else not running.
func notHeld(queueID string, token int64, status string, cur int64) error {
	if cur != token {
		return touba.Errorf(touba.ELeaseLost, "entry %s is leased under token %d, not %d", queueID, cur, token)
	} else if status != touba.StatusRunning {
		return fmt.Errorf("entry %s: not running", queueID)
	}
	return nil
}

// cancelIfRequested ends cancelled the running entry leased under token if
// it was asked to cancel (a transition's guard refused it for that); done
// says it did. It writes: an error after that is the batch's.
func (q *Queue) cancelIfRequested(ctx context.Context, tx *sqlitex.Tx, queueID string, token int64) (done bool, err error) {
	var ref string
	var key sql.NullString
	var max int
	err = tx.QueryRowContext(ctx, qCancelRunning, q.now(), queueID, token).Scan(&ref, &key, &max)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("entry %s: cancel: %w", queueID, err)
	}
	if key.Valid && max > 0 {
		if _, err := tx.ExecContext(ctx, releaseNext, ref, key.String, max); err != nil {
			return true, fmt.Errorf("release key of %s: %w", queueID, err)
		}
	}
	return true, nil
}

// execer is a transaction of either kind (the writer's or database/sql's).
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// cancelParked ends a parked entry asked to cancel while its step ran,
// cancelled (SPEC §2.3: the request survives the park), and lets the next
// entries of its key (ref, key, max as read by the caller) go: what an
// operator's replay or resume of it does unless told to ignore the request.
func (q *Queue) cancelParked(ctx context.Context, tx execer, queueID, ref string, key sql.NullString, max int) error {
	if _, err := tx.ExecContext(ctx, `UPDATE entries SET status = 'cancelled', error_code = '`+touba.ERunCancelled+`',
		error_message = cancel_requested, cancel_requested = NULL, not_before = NULL, wake_at = NULL, attempts = 0,
		held = 0, hold_on = NULL, updated_at = ?
		WHERE queue_id = ? AND status = 'parked' AND cancel_requested IS NOT NULL`, q.now(), queueID); err != nil {
		return fmt.Errorf("entry %s: cancel at replay: %w", queueID, err)
	}
	if key.Valid && max > 0 {
		if _, err := tx.ExecContext(ctx, releaseNext, ref, key.String, max); err != nil {
			return fmt.Errorf("release key of %s: %w", queueID, err)
		}
	}
	return nil
}

// whyNot reads the entry to explain a guarded change that matched no row.
// The explanation is the change's own error (commit.Refused: it wrote
// nothing); a failed read is the transaction's.
func whyNot(ctx context.Context, tx *sqlitex.Tx, queueID string, token int64) error {
	var st string
	var cur int64
	err := tx.QueryRowContext(ctx, `SELECT status, lease_token FROM entries WHERE queue_id = ?`, queueID).Scan(&st, &cur)
	if errors.Is(err, sql.ErrNoRows) {
		return commit.Refused(fmt.Errorf("entry %s: not running", queueID))
	} else if err != nil {
		return fmt.Errorf("entry %s: %w", queueID, err)
	}
	if err := notHeld(queueID, token, st, cur); err != nil {
		return commit.Refused(err)
	}
	return commit.Refused(fmt.Errorf("entry %s: not running", queueID))
}

// transition runs one guarded update through the writer; pending is how
// the pending count moves when it applies. One statement: no savepoint.
func (q *Queue) transition(queueID string, token, pending int64, query string, args ...any) error {
	return q.guarded(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return 0, fmt.Errorf("entry %s: %w", queueID, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			if done, err := q.cancelIfRequested(ctx, tx, queueID, token); done || err != nil {
				return 0, err
			}
			return 0, whyNot(ctx, tx, queueID, token)
		}
		return pending, nil
	})
}

// ReplayResult says what Replay did with one queue id.
type ReplayResult = touba.ReplayResult

// Replay puts failed, parked and cancelled entries back to pending with
// the same queue id, so effects already applied are read back, not
// repeated. Ids in other states are reported, not changed. A merged
// entry's id replays its carrier (reported under the carrier's id).
func (q *Queue) Replay(ctx context.Context, ids []string, opt touba.ReplayOptions) ([]ReplayResult, error) {
	if q.w == nil {
		return nil, sqlitex.ErrReadOnly
	}
	var out []ReplayResult
	err := sqlitex.InTx(ctx, q.db.Write, func(tx *sql.Tx) error {
		out = out[:0]
		for _, id := range ids {
			var st, ref, carrier string
			var key sql.NullString
			var max int
			var cancel bool
			read := func() error {
				return tx.QueryRowContext(ctx, `SELECT status, cancel_requested IS NOT NULL, trigger_ref, conc_key, conc_max,
					COALESCE(merged_into, '') FROM entries WHERE queue_id = ?`, id).Scan(&st, &cancel, &ref, &key, &max, &carrier)
			}
			err := read()
			if err == nil && st == touba.StatusMerged && carrier != "" {
				// A merged entry's run is its carrier's (SPEC §2.1).
				id = carrier
				err = read()
			}
			if err == sql.ErrNoRows {
				out = append(out, ReplayResult{QueueID: id, Reason: "no such entry"})
				continue
			} else if err != nil {
				return err
			}
			if st != touba.StatusFailed && st != touba.StatusParked && st != touba.StatusCancelled {
				out = append(out, ReplayResult{QueueID: id, Reason: "entry is " + st + "; only failed, parked and cancelled entries are replayed"})
				continue
			}
			if st == touba.StatusParked && cancel && !opt.IgnoreCancel {
				if err := q.cancelParked(ctx, tx, id, ref, key, max); err != nil {
					return err
				}
				out = append(out, ReplayResult{QueueID: id, From: st, To: touba.StatusCancelled})
				continue
			}
			if _, err := tx.ExecContext(ctx, `UPDATE entries SET status = 'pending', not_before = NULL, attempts = 0,
				wake_at = NULL, cancel_requested = NULL, held = CASE WHEN hold_on IS NULL THEN held ELSE 0 END, hold_on = NULL,
				program_digest = COALESCE(NULLIF(?, ''), program_digest), updated_at = ? WHERE queue_id = ?`,
				opt.Repin[ref], q.now(), id); err != nil {
				return err
			}
			// Ended again, it must be in a retention pass's range (purge.go).
			if err := lowerMark(ctx, tx, q.opts.Now(), id); err != nil {
				return err
			}
			// A cancelled entry may have been cancelled while it waited: its
			// wait ended cancelled, and the replayed run must wait again
			// rather than read that end; so must one whose wait timed out
			// (failed WaitTimedOut), which then takes an offer accepted
			// since. A wait that completed stays.
			if _, err := tx.ExecContext(ctx, `DELETE FROM waits WHERE queue_id = ? AND state IN ('open', 'cancelled', 'timed_out')`, id); err != nil {
				return err
			}
			if err := reholdKey(ctx, tx, id); err != nil {
				return err
			}
			out = append(out, ReplayResult{QueueID: id, From: st, To: touba.StatusPending})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	for _, r := range out {
		if r.To == touba.StatusPending {
			q.pending.Add(1)
		}
	}
	return out, nil
}

// IDsByStatus lists queue ids in a state, optionally of one trigger.
func (q *Queue) IDsByStatus(ctx context.Context, status, triggerRef string) ([]string, error) {
	query, args := `SELECT queue_id FROM entries WHERE status = ?`, []any{status}
	if triggerRef != "" {
		query, args = query+` AND trigger_ref = ?`, append(args, triggerRef)
	}
	rows, err := q.db.Read.QueryContext(ctx, query+` ORDER BY queue_id`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanIDs(rows)
}
