package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// claimSets are claimPlan's settings for the common case.
var claimSets = []string{`SET LOCAL enable_bitmapscan = off`, `SET LOCAL enable_sort = off`, `SET LOCAL jit = off`}

// claimPlan chooses the pick of pending entries for a lease in tx (around
// the paused triggers when there are any: queue_holds.go) and keeps the claim on the ordered index scan of entries_ready
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
//
// It reads the lease's floor in the same round trip (queue_floor.go).
func claimPlan(ctx context.Context, tx *Tx) (pick string, floor *string, err error) {
	// One round trip: the settings for the common case (no trigger paused),
	// whether it is the common case, and the floor.
	b := &pgx.Batch{}
	for _, set := range claimSets {
		b.Queue(set)
	}
	b.Queue(anyPaused)
	b.Queue(readFloor)
	br, err := tx.sendBatch(ctx, b)
	if err != nil {
		return "", nil, err
	}
	for range claimSets {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return "", nil, err
		}
	}
	var paused bool
	if err := br.QueryRow().Scan(&paused); err != nil {
		br.Close()
		return "", nil, err
	}
	if err := br.QueryRow().Scan(&floor); err != nil {
		br.Close()
		return "", nil, err
	}
	if err := br.Close(); err != nil {
		return "", nil, err
	}
	if !paused {
		return pickPending, floor, nil
	}
	if _, err := tx.Exec(ctx, `SET LOCAL enable_sort = on`); err != nil {
		return "", nil, err
	}
	return pickAround, floor, nil
}
