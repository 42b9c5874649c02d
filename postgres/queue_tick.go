package postgres

import (
	"context"
	"fmt"
)

// LatestTickID returns the newest tick of the schedule trigger triggerRef
// any node enqueued, or "" when it has none: what a schedule catches up
// from at start (package schedule). It is the greater of the trigger's
// schedule cursor (moved by each tick's enqueue, never forgotten by
// --history) and the greatest event id of its entries that has the form
// of a tick (RFC 3339 in UTC, whole seconds: 2026-12-01T03:00:00Z), which
// the previous release, without cursors, may still be writing.
func (q *Queue) LatestTickID(ctx context.Context, triggerRef string) (string, error) {
	var id string
	// These ids differ only in digits at fixed places, so any collation
	// orders them as their times; event_id <> '' matches the identity index.
	err := q.db.pool.QueryRow(ctx, `SELECT COALESCE(max(id), '') FROM (
		SELECT tick_id AS id FROM touba.schedule_cursors WHERE trigger_ref = $1
		UNION ALL
		(SELECT event_id FROM touba.entries
		WHERE trigger_ref = $1 AND event_id <> ''
		  AND event_id ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$'
		ORDER BY event_id DESC LIMIT 1)) t`, triggerRef).Scan(&id)
	if err != nil {
		return "", fmt.Errorf("latest tick of %s: %w", triggerRef, err)
	}
	return id, nil
}

// qMoveCursors moves each trigger's schedule cursor to the newest of its
// ticks given, forward only, the triggers in order (the rows' locks are
// taken alike by every node's batch).
const qMoveCursors = `INSERT INTO touba.schedule_cursors (trigger_ref, tick_id)
	SELECT ref, max(id) FROM unnest($1::text[], $2::text[]) AS t(ref, id) GROUP BY ref ORDER BY ref
	ON CONFLICT (trigger_ref) DO UPDATE SET tick_id = EXCLUDED.tick_id
	WHERE touba.schedule_cursors.tick_id < EXCLUDED.tick_id`

// moveCursors moves the schedule cursors to the ticks among ops that have
// an entry (new or already there), in the transaction that enqueued them:
// a tick in the queue and its cursor commit together. A tick whose
// identity was busy elsewhere (no entry yet) moves nothing.
func moveCursors(ctx context.Context, q querier, ops []*enqueueOp) error {
	var refs, ids []string
	for _, o := range ops {
		if o.d.Tick && o.d.EventID != "" && !o.busy && o.res.QueueID != "" {
			refs, ids = append(refs, o.d.TriggerRef), append(ids, o.d.EventID)
		}
	}
	if len(refs) == 0 {
		return nil
	}
	if _, err := q.Exec(ctx, qMoveCursors, refs, ids); err != nil {
		return fmt.Errorf("schedule cursors: %w", err)
	}
	return nil
}
