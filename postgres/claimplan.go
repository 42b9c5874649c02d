package postgres

import "context"

// claimPlan keeps the claim on the ordered index scan of entries_ready
// (status, held, queue_id), which stops after the batch, for the rest of
// the lease's transaction (SET LOCAL: nothing stays on a pooled session).
// Right after a burst of intake the table's statistics still say there
// are few pending entries (autovacuum analyzes it a minute later at the
// soonest), and the planner then reads every pending entry by a bitmap
// scan and sorts them all, for each batch of 30: 15-24 ms a claim with
// 5,000-6,000 pending against 0.2 ms on the index (EXPLAIN ANALYZE, issue
// 28), so a backlog drained in quadratic time. Every other statement of
// a batch reads by key, where a bitmap scan is never the better plan.
func claimPlan(ctx context.Context, tx *Tx) error {
	_, err := tx.Exec(ctx, `SET LOCAL enable_bitmapscan = off`)
	return err
}
