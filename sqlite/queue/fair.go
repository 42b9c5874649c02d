package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// Fair dispatch (touba.FairQueue, schema/0007_fair.sql): a planned lease
// takes, in the writer's one batch, so many entries of each trigger (each
// ask one seek in entries_ready_trigger, oldest first), so one trigger's
// backlog never fills a lease; a run held by its binding waits pending
// with held = 1 and hold_on set, in no trigger's ask, until an ask names
// its hold.

var _ touba.FairQueue = (*Queue)(nil)

const (
	// qLeaseTrigger is one trigger's ask: its oldest due entries that no
	// key, pause or binding holds back. The pause is asked once, outside
	// the scan: inside it, SQLite asked it of every row it read, and a
	// paused trigger's 100,000 entries cost every lease 100,000 probes.
	qLeaseTrigger = `UPDATE entries SET status = 'running', attempts = attempts + 1, lease_token = lease_token + 1, updated_at = ?
	WHERE NOT EXISTS (SELECT 1 FROM paused_triggers p WHERE p.trigger_ref = ?)
	  AND queue_id IN (SELECT queue_id FROM entries INDEXED BY entries_ready_trigger
	                   WHERE trigger_ref = ? AND status = 'pending' AND held = 0 AND (not_before IS NULL OR not_before <= ?)
	                   ORDER BY queue_id LIMIT ?)
	RETURNING ` + entryColumns
	// qLeaseByKey is one trigger's ask by key turns: among its oldest
	// runnable entries ($4 of them at most), the first of each key value,
	// then the second of each, and so on.
	qLeaseByKey = `UPDATE entries SET status = 'running', attempts = attempts + 1, lease_token = lease_token + 1, updated_at = ?
	WHERE NOT EXISTS (SELECT 1 FROM paused_triggers p WHERE p.trigger_ref = ?)
	  AND queue_id IN (SELECT queue_id FROM (
	    SELECT queue_id, ROW_NUMBER() OVER (PARTITION BY conc_key ORDER BY queue_id) AS turn FROM (
	      SELECT queue_id, conc_key FROM entries INDEXED BY entries_ready_trigger
	      WHERE trigger_ref = ? AND status = 'pending' AND held = 0 AND (not_before IS NULL OR not_before <= ?)
	      ORDER BY queue_id LIMIT ?))
	  ORDER BY turn, queue_id LIMIT ?)
	RETURNING ` + entryColumns
	// qLeaseHold is a hold's ask: the oldest entries handed back on it,
	// of triggers not paused (of one trigger, ? not ''). Leased, they are
	// no longer held.
	qLeaseHold = `UPDATE entries SET status = 'running', attempts = attempts + 1, lease_token = lease_token + 1, updated_at = ?,
		held = 0, hold_on = NULL
	WHERE queue_id IN (SELECT queue_id FROM entries e INDEXED BY entries_hold
	                   WHERE hold_on = ? AND status = 'pending' AND (? = '' OR e.trigger_ref = ?)
	                     AND NOT EXISTS (SELECT 1 FROM paused_triggers p WHERE p.trigger_ref = e.trigger_ref)
	                   ORDER BY queue_id LIMIT ?)
	RETURNING ` + entryColumns
	// qHoldRun hands a running entry back on a hold, giving back the
	// attempt its lease counted; not one asked to cancel (it ends
	// cancelled: transition's cancelIfRequested).
	qHoldRun = `UPDATE entries SET status = 'pending', attempts = MAX(attempts - 1, 0), held = 1, hold_on = ?,
		error_code = NULLIF(?, ''), error_message = NULLIF(?, ''), not_before = NULL, updated_at = ?
		WHERE queue_id = ? AND status = 'running' AND lease_token = ? AND cancel_requested IS NULL`
)

// LeasePlanned leases what plan asks for, in the writer's next batch (as
// Lease: sharing the commit of the ends queued before it).
func (q *Queue) LeasePlanned(ctx context.Context, plan touba.LeasePlan) ([]*touba.Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	now := q.now()
	var out []*touba.Delivery
	err := q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		out = out[:0]
		plan.Reset()
		for a, ok := plan.Next(); ok; a, ok = plan.Next() {
			var rows *sqlitex.Rows
			var err error
			switch {
			case a.Hold != "":
				rows, err = tx.QueryContext(ctx, qLeaseHold, now, a.Hold, a.TriggerRef, a.TriggerRef, a.N)
			case a.ByKey:
				rows, err = tx.QueryContext(ctx, qLeaseByKey, now, a.TriggerRef, a.TriggerRef, now, touba.KeyScan(a.N), a.N)
			default:
				rows, err = tx.QueryContext(ctx, qLeaseTrigger, now, a.TriggerRef, a.TriggerRef, now, a.N)
			}
			if err != nil {
				return 0, err
			}
			got, err := scanEntries(rows)
			rows.Close()
			if err != nil {
				return 0, err
			}
			out = append(out, got...)
			plan.Took(a, len(got))
		}
		return -int64(len(out)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	return out, nil
}

// HoldRun hands a running entry back on hold (a binding's ref).
func (q *Queue) HoldRun(ctx context.Context, queueID string, token int64, hold, code, message string) error {
	if hold == "" {
		return fmt.Errorf("hold %s: no hold named", queueID)
	}
	return q.transition(queueID, token, 1, qHoldRun, hold, code, message, q.now(), queueID, token)
}

// ReadyTriggers lists the triggers with leasable entries: one seek a
// trigger in entries_ready_trigger (qNextReadyRef).
func (q *Queue) ReadyTriggers(ctx context.Context) ([]string, error) {
	var out []string
	for ref := ""; ; {
		err := q.db.Read.QueryRowContext(ctx, qNextReadyRef, ref).Scan(&ref)
		if errors.Is(err, sql.ErrNoRows) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("ready triggers: %w", err)
		}
		out = append(out, ref)
	}
}
