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
//
// With bitmap scans off, the same stale statistics made the planner read
// the partial index entries_ready_trigger (pending, not held; ordered by
// trigger, not by queue id) whole, then sort: EXPLAIN (ANALYZE) during a
// drain of 20,000, 13,000-16,500 rows read and 34-61 ms a claim for 64
// (issue 28, pgspeed2). With pickPending (no trigger paused), sorts off
// too: its ORDER BY queue_id LIMIT then comes from entries_ready's order
// and stops after the batch (0.15-0.22 ms); the take-over pick has no
// sort-free plan and keeps its own. pickAround (some trigger paused) needs
// its sorts: without them the planner walks every paused entry. JIT off:
// a disabled sort costs 10^10 in the plan, far past jit_above_cost, and
// compiling the take-over pick with LLVM took seconds (a lease of one
// entry ran into --database-timeout on a loaded box).
func claimPlan(ctx context.Context, tx *Tx, noSort bool) error {
	set := `SET LOCAL enable_bitmapscan = off`
	if noSort {
		set += `; SET LOCAL enable_sort = off; SET LOCAL jit = off`
	}
	_, err := tx.Exec(ctx, set)
	return err
}
