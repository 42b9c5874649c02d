package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/commit"
)

// change runs fn in the writer's next batch, under its own savepoint, and
// waits for the batch, whatever the caller's context: the change may be
// committing, and the caller must not act before knowing.
// A change that lost a deadlock with another node's batch was undone
// whole (its savepoint): it is tried again in the next batch. fn is run
// again for that, so it sets its results on every run: it is redo-safe
// (commit.Writer.DoRedo), and its batch takes no savepoint per operation
// unless one fails.
func (q *Queue) change(queueID string, fn func(ctx context.Context, tx *Tx) error) error {
	err := retried(func() error { return errClosed(q.db.writer(queueID).DoRedo(context.Background(), fn)) })
	if err != nil && touba.ErrorCode(err) == touba.EINTERNAL {
		return fmt.Errorf("queue commit: %w", err)
	}
	return err
}

// takeOver is an entry leased after its previous lease expired, or one
// its own node, restarted, put back to pending (restart).
type takeOver struct {
	queueID, oldOwner string
	restart           bool
}

// takeOverEvery bounds how long an expired lease waits to be taken over
// by a node whose leases fill with pending entries.
const takeOverEvery = 500 * time.Millisecond

// Lease takes up to n entries: first running entries whose lease expired
// (their node died or was cut off; under a backlog, at most every
// takeOverEvery), then due pending ones, oldest first,
// each locked with FOR UPDATE SKIP LOCKED so that nodes leasing at once
// never take the same entry. Each gets a new fencing token. Before an
// expired entry is returned, its dispatched effects are recorded unknown
// (SPEC §8), in the same transaction.
func (q *Queue) Lease(ctx context.Context, n int) ([]*touba.Delivery, error) {
	var out []*touba.Delivery
	var took []takeOver
	// Expired leases first, when the last look that found none left is
	// takeOverEvery old; between, only when the pending entries do not
	// fill the lease.
	// The look costs a walk of every running entry's index entry (most
	// alive, under their lease), which a drain paid at every lease.
	takeOverDue := time.Since(time.Unix(0, q.takenOverAt.Load())) >= takeOverEvery
	drained := false // the look for expired leases found fewer than it asked
	err := q.change("", func(ctx context.Context, tx *Tx) error {
		out, took, drained = out[:0], took[:0], false
		now := q.db.now()
		pending, bound, parked, err := q.leaseBegin(ctx, tx, now)
		if err != nil {
			return err
		}
		took = append(took, parked...)
		expired := q.expiredPick()
		picks := []string{expired, pending}
		if !takeOverDue {
			picks = []string{pending, expired}
		}
		for _, pick := range picks {
			if len(out) >= n {
				break
			}
			before := len(out)
			if out, took, err = q.claim(ctx, tx, pick, bound, n-len(out), out, took); err != nil {
				return err
			}
			drained = drained || pick == expired && len(out)-before < n-before
		}
		if len(took) > 0 {
			return q.db.takeOverEffects(ctx, tx, took, now)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	q.leased(drained, took)
	return out, nil
}

// leaseBegin reads the pick of pending entries for a lease (claimPlan)
// and, while some trigger is paused, takes over that trigger's entries
// whose lease expired, to wait pending, not run again (queue_holds.go).
//
// bound is the lower bound of the lease's floor, for claim.
func (q *Queue) leaseBegin(ctx context.Context, tx *Tx, now string) (pending, bound string, took []takeOver, err error) {
	pending, floor, err := claimPlan(ctx, tx)
	if err != nil {
		return "", "", nil, err
	}
	bound = q.db.hot.floorBound(floor)
	if pending != pickAround {
		return pending, bound, nil, nil
	}
	took, err = q.takeOverPaused(ctx, tx, now)
	return pending, bound, took, err
}

// expiredPick selects, for claim, the running entries whose lease expired
// by the database's clock, oldest expiry first, but a paused trigger's.
func (q *Queue) expiredPick() string {
	return `SELECT ` + pickCols + ` FROM touba.entries e WHERE status = 'running' AND lease_expires_at < ` + q.db.dbNow() + `
		AND NOT EXISTS (SELECT 1 FROM touba.paused_triggers p WHERE p.trigger_ref = e.trigger_ref)
		ORDER BY lease_expires_at LIMIT $2 FOR UPDATE SKIP LOCKED`
}

// leased notes a lease's look for expired leases and logs what it took
// over from other nodes.
func (q *Queue) leased(drained bool, took []takeOver) {
	if drained {
		// None left: the next look can wait. One that filled the lease
		// leaves the next lease due, so a dead node's entries are taken
		// over lease after lease, not n every takeOverEvery.
		q.takenOverAt.Store(time.Now().UnixNano())
	}
	for _, t := range took {
		q.db.log.Warn().Str("event", "lease.taken_over").Str("queue_id", t.queueID).Str("previous_node", t.oldOwner).
			Msg("lease expired; entry taken over from another node")
	}
}

// qualified is entryColumns with each column read from alias p.
func qualified(p string) string {
	return p + `queue_id, ` + p + `trigger_ref, ` + p + `event_id, ` + p + `digest, ` + p + `body, ` + p + `headers, ` +
		p + `remote_addr, ` + p + `received_at, ` + p + `status, ` + p + `attempts, COALESCE(` + p + `error_code, ''), ` +
		p + `updated_at, ` + p + `traceparent, COALESCE(` + p + `conc_key, ''), ` + p + `conc_max, ` + p + `held, ` +
		p + `lease_token, COALESCE(` + p + `lease_owner, ''), COALESCE(` + p + `lease_owner, ` + p + `last_node, ''), ` +
		p + `program_digest, ` + p + `wake_at, COALESCE(` + p + `merged_into, '')`
}

// prefixScanner scans leading columns into extra, then the rest as an entry.
type prefixScanner struct {
	rows  pgx.Rows
	extra []any
}

func (s prefixScanner) Scan(dest ...any) error {
	return s.rows.Scan(append(s.extra, dest...)...)
}

// Finish ends a running entry held under token as done, failed, parked
// or cancelled. An entry asked to cancel while it ran (cancel_requested)
// ends cancelled instead of failed; done stays done (it completed) and
// parked stays parked (an unknown outcome must reach an operator), the
// request kept for when it runs again.
func (q *Queue) Finish(ctx context.Context, queueID string, token int64, status, code, message string) error {
	switch status {
	case touba.StatusDone, touba.StatusFailed, touba.StatusParked, touba.StatusCancelled:
	default:
		return fmt.Errorf("finish %s: bad status %q", queueID, status)
	}
	var derr error // a deferred run's own error (tx_deferred.go)
	single := func(ctx context.Context, tx *Tx) error {
		var ref, final string
		var key *string
		var max int
		err := tx.QueryRow(ctx, `UPDATE touba.entries SET
			status = CASE WHEN $1 = 'failed' AND cancel_requested IS NOT NULL THEN 'cancelled' ELSE $1 END,
			error_code = CASE WHEN $1 = 'failed' AND cancel_requested IS NOT NULL THEN '`+touba.ERunCancelled+`' ELSE NULLIF($2, '') END,
			error_message = CASE WHEN $1 = 'failed' AND cancel_requested IS NOT NULL THEN cancel_requested ELSE NULLIF($3, '') END,
			cancel_requested = CASE WHEN $1 = 'parked' THEN cancel_requested END,
			not_before = NULL, updated_at = $4, lease_owner = NULL, lease_expires_at = NULL
			WHERE queue_id = $5 AND status = 'running' AND lease_token = $6
			RETURNING trigger_ref, conc_key, conc_max, status`, status, code, message, q.db.now(), queueID, token).Scan(&ref, &key, &max, &final)
		if errors.Is(err, pgx.ErrNoRows) {
			return refusedWhy(ctx, tx, queueID, token)
		} else if err != nil {
			return err
		}
		if keyLeft(final, code) && key != nil && max > 0 {
			return release(ctx, tx, ref, *key, max)
		}
		return nil
	}
	err := q.change(queueID, func(ctx context.Context, tx *Tx) error {
		derr = nil
		if tx.deferring(ctx, queueID) {
			// One statement with the batch's other ends (journal_batch.go).
			tx.d.ends = append(tx.d.ends, endRow{queueID: queueID, token: token, status: status, code: code, message: message,
				done: func(ctx context.Context, e *endedRow) error {
					if e == nil {
						return tx.settle(single(ctx, tx), &derr)
					}
					if keyLeft(e.final, code) && e.key != nil && e.max > 0 {
						return release(ctx, tx, e.ref, *e.key, e.max)
					}
					return nil
				}})
			return nil
		}
		return single(ctx, tx)
	})
	if err == nil {
		err = derr
	}
	return err
}

// keyLeft tells whether an entry ending in status with code leaves its
// key's active set: every end but a park, and a park ProgramChanged (its
// trigger changed under it: it keeps the key until then, never after).
func keyLeft(status, code string) bool {
	return status != touba.StatusParked || code == touba.EProgramChanged
}

// Retry puts a running entry held under token back to pending.
func (q *Queue) Retry(ctx context.Context, queueID string, token int64, notBefore time.Time, code, message string) error {
	return q.back(queueID, token, `attempts`, notBefore, code, message)
}

// Postpone is Retry giving back the attempt the lease counted.
func (q *Queue) Postpone(ctx context.Context, queueID string, token int64, notBefore time.Time, code, message string) error {
	return q.back(queueID, token, `GREATEST(attempts - 1, 0)`, notBefore, code, message)
}

// back ends a run short of its end: pending again, or cancelled when a
// cancel_on match asked it to while it ran (its key then freed).
func (q *Queue) back(queueID string, token int64, attempts string, notBefore time.Time, code, message string) error {
	return q.change(queueID, func(ctx context.Context, tx *Tx) error {
		var ref, final string
		var key *string
		var max int
		err := tx.QueryRow(ctx, `UPDATE touba.entries SET
			status = CASE WHEN cancel_requested IS NULL THEN 'pending' ELSE 'cancelled' END,
			attempts = CASE WHEN cancel_requested IS NULL THEN `+attempts+` ELSE attempts END,
			error_code = CASE WHEN cancel_requested IS NULL THEN NULLIF($1, '') ELSE '`+touba.ERunCancelled+`' END,
			error_message = CASE WHEN cancel_requested IS NULL THEN NULLIF($2, '') ELSE cancel_requested END,
			not_before = CASE WHEN cancel_requested IS NULL THEN $3 END, cancel_requested = NULL, updated_at = $4,
			lease_owner = NULL, lease_expires_at = NULL
			WHERE queue_id = $5 AND status = 'running' AND lease_token = $6
			RETURNING trigger_ref, conc_key, conc_max, status`,
			code, message, touba.FormatTime(notBefore), q.db.now(), queueID, token).Scan(&ref, &key, &max, &final)
		if errors.Is(err, pgx.ErrNoRows) {
			return refusedWhy(ctx, tx, queueID, token)
		} else if err != nil {
			return err
		}
		if final == touba.StatusCancelled && key != nil && max > 0 {
			return release(ctx, tx, ref, *key, max)
		}
		return nil
	})
}

// Renew extends the lease held under token by --lease-ttl from now.
func (q *Queue) Renew(ctx context.Context, queueID string, token int64) error {
	return q.change(queueID, func(ctx context.Context, tx *Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE touba.entries SET lease_expires_at = `+q.db.dbExpiry()+`
			WHERE queue_id = $1 AND status = 'running' AND lease_token = $2`, queueID, token)
		if err != nil {
			return err
		} else if tag.RowsAffected() != 1 {
			// A refusal of this renewal alone, as Finish's: the rest of
			// an optimistic batch goes on without rerunning isolated.
			return refusedWhy(ctx, tx, queueID, token)
		}
		return nil
	})
}

// errNotRunning: whyNot found the entry not running.
var errNotRunning = errors.New("not running")

// refusedWhy is whyNot for a change whose guarded statement, its only
// write, matched nothing: its explanation is its own error (Refused), so
// an optimistic batch goes on without it instead of running again
// isolated; a failure to read stays the batch's.
func refusedWhy(ctx context.Context, tx *Tx, queueID string, token int64) error {
	err := whyNot(ctx, tx, queueID, token)
	if touba.ErrorCode(err) == touba.ELeaseLost || errors.Is(err, errNotRunning) {
		return commit.Refused(err)
	}
	return err
}

// whyNot explains a guarded change that matched no row: LeaseLost when the
// entry is leased under another token, else not running.
func whyNot(ctx context.Context, tx *Tx, queueID string, token int64) error {
	var st, owner string
	var cur int64
	err := tx.QueryRow(ctx, `SELECT status, lease_token, COALESCE(lease_owner, '') FROM touba.entries WHERE queue_id = $1`, queueID).
		Scan(&st, &cur, &owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("entry %s: %w", queueID, errNotRunning)
	} else if err != nil {
		return err
	}
	if cur != token {
		return touba.Errorf(touba.ELeaseLost, "entry %s is leased under token %d (node %q), not %d", queueID, cur, owner, token)
	}
	return fmt.Errorf("entry %s: %w", queueID, errNotRunning)
}
