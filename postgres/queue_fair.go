package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
)

// Fair dispatch (touba.FairQueue, migrations/0014_fair.sql): a planned
// lease takes, in one transaction, so many entries of each trigger (each
// ask one ordered scan of entries_ready_trigger that stops after its
// batch), so one trigger's backlog never fills a lease; a run held by its
// binding waits pending with held and hold_on set, until a lease's ask on
// any node names its hold. Expired leases are taken over first, as by
// Lease, within the plan's free workers.

var _ touba.FairQueue = (*Queue)(nil)

const (
	// pickTrigger is one trigger's ask ($4 its ref).
	pickTrigger = `SELECT ` + pickCols + ` FROM touba.entries e WHERE e.status = 'pending' AND NOT e.held AND e.trigger_ref = $4
		AND (e.not_before IS NULL OR e.not_before <= $1)
		AND NOT EXISTS (SELECT 1 FROM touba.paused_triggers p WHERE p.trigger_ref = $4)
		ORDER BY e.queue_id COLLATE "C" LIMIT $2 FOR UPDATE SKIP LOCKED`
	// pickByKey is one trigger's ask by key turns ($5 the entries looked
	// at): the first of each key value among its oldest runnable, then the
	// second of each... Those looked at are locked for the transaction,
	// leased or not (a window function cannot take FOR UPDATE itself).
	pickByKey = `SELECT queue_id, status, owner, leased FROM (
		SELECT queue_id, status, owner, leased, ROW_NUMBER() OVER (PARTITION BY conc_key ORDER BY queue_id COLLATE "C") AS turn FROM (
			SELECT ` + pickCols + `, conc_key FROM touba.entries e WHERE e.status = 'pending' AND NOT e.held AND e.trigger_ref = $4
				AND (e.not_before IS NULL OR e.not_before <= $1)
				AND NOT EXISTS (SELECT 1 FROM touba.paused_triggers p WHERE p.trigger_ref = $4)
			ORDER BY e.queue_id COLLATE "C" LIMIT $5 FOR UPDATE SKIP LOCKED) w) r
		ORDER BY turn, queue_id COLLATE "C" LIMIT $2`
	// pickHold is a hold's ask ($4 the binding): its oldest entries, of
	// triggers not paused (of trigger $5 only, when not '').
	pickHold = `SELECT ` + pickCols + ` FROM touba.entries e WHERE e.hold_on = $4 AND e.status = 'pending'
		AND ($5::text = '' OR e.trigger_ref = $5)
		AND NOT EXISTS (SELECT 1 FROM touba.paused_triggers p WHERE p.trigger_ref = e.trigger_ref)
		ORDER BY e.queue_id COLLATE "C" LIMIT $2 FOR UPDATE SKIP LOCKED`
)

// LeasePlanned leases what plan asks for, in one transaction.
func (q *Queue) LeasePlanned(ctx context.Context, plan touba.LeasePlan) ([]*touba.Delivery, error) {
	var out []*touba.Delivery
	var took []takeOver
	takeOverDue := time.Since(time.Unix(0, q.takenOverAt.Load())) >= takeOverEvery
	drained := false
	err := q.change("", func(ctx context.Context, tx *Tx) error {
		out, took, drained = out[:0], took[:0], false
		plan.Reset()
		now := q.db.now()
		_, bound, parked, err := q.leaseBegin(ctx, tx, now)
		if err != nil {
			return err
		}
		took = append(took, parked...)
		if n := plan.Free(); takeOverDue && n > 0 {
			if out, took, err = q.claim(ctx, tx, q.expiredPick(), bound, n, out, took); err != nil {
				return err
			}
			drained = len(out) < n
			plan.Took(touba.LeaseAsk{Hold: touba.HoldTakeOver, N: n}, len(out))
		}
		for a, ok := plan.Next(); ok; a, ok = plan.Next() {
			before := len(out)
			pick, args := pickTrigger, []any{a.TriggerRef}
			switch {
			case a.Hold != "":
				pick, args = pickHold, []any{a.Hold, a.TriggerRef}
			case a.ByKey:
				pick, args = pickByKey, []any{a.TriggerRef, touba.KeyScan(a.N)}
			}
			if out, took, err = q.claim(ctx, tx, pick, bound, a.N, out, took, args...); err != nil {
				return err
			}
			plan.Took(a, len(out)-before)
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

// HoldRun hands a running entry back on hold (a binding's ref), giving
// back the attempt its lease counted; one asked to cancel ends cancelled
// (its key freed), as in back.
func (q *Queue) HoldRun(ctx context.Context, queueID string, token int64, hold, code, message string) error {
	if hold == "" {
		return fmt.Errorf("hold %s: no hold named", queueID)
	}
	return q.change(queueID, func(ctx context.Context, tx *Tx) error {
		var ref, final string
		var key *string
		var max int
		err := tx.QueryRow(ctx, `UPDATE touba.entries SET
			status = CASE WHEN cancel_requested IS NULL THEN 'pending' ELSE 'cancelled' END,
			attempts = CASE WHEN cancel_requested IS NULL THEN GREATEST(attempts - 1, 0) ELSE attempts END,
			held = cancel_requested IS NULL, hold_on = CASE WHEN cancel_requested IS NULL THEN $6 END,
			error_code = CASE WHEN cancel_requested IS NULL THEN NULLIF($1, '') ELSE '`+touba.ERunCancelled+`' END,
			error_message = CASE WHEN cancel_requested IS NULL THEN NULLIF($2, '') ELSE cancel_requested END,
			not_before = NULL, cancel_requested = NULL, updated_at = $3, lease_owner = NULL, lease_expires_at = NULL
			WHERE queue_id = $4 AND status = 'running' AND lease_token = $5
			RETURNING trigger_ref, conc_key, conc_max, status`,
			code, message, q.db.now(), queueID, token, hold).Scan(&ref, &key, &max, &final)
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

// HeldRuns: queue_holdcount.go.

// ReadyTriggers lists the triggers with leasable entries: a loose index
// scan of entries_ready_trigger, one seek a trigger (as pickAround), above
// the lease's floor as a lease reads them.
func (q *Queue) ReadyTriggers(ctx context.Context) ([]string, error) {
	rows, err := q.db.pool.Query(ctx, bounded(readyRefs, q.boundNow(ctx))+` SELECT ref FROM refs WHERE ref IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("ready triggers: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var ref string
		if err := rows.Scan(&ref); err != nil {
			return nil, fmt.Errorf("ready triggers: %w", err)
		}
		out = append(out, ref)
	}
	return out, rows.Err()
}
