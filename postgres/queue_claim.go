package postgres

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
)

// claimPlanSets hold the claim's plan, whatever the session's
// plan_cache_mode says, to its generic plan with the update joined to the
// pick row by row (a primary-key probe of the one partition the row is
// in, the others pruned at run time): planning it each time cost 1.5 to
// 13 ms a lease on the 90-day layout (issue 42, EXPLAIN ANALYZE), more
// than running it, and where the planner hashed the join instead (a
// small table, or a generic plan's estimate of the pick, a tenth of the
// pending entries) it read every entry of every partition. claimPlanResets
// give the rest of the transaction its settings back (RESET: the
// session's own, as no statement before a lease's sets them).
var (
	claimPlanSets = []string{`SET LOCAL plan_cache_mode = force_generic_plan`, `SET LOCAL enable_hashjoin = off`,
		`SET LOCAL enable_mergejoin = off`}
	claimPlanResets = []string{`RESET plan_cache_mode`, `RESET enable_hashjoin`, `RESET enable_mergejoin`}
)

// claim leases the entries pick selects (its $1 the time, $2 the limit,
// $3 this node, then extra; its columns pickCols), up to n, appending
// them to out and the expired leases it took over to took. An entry
// handed back on a hold is no longer held once leased.
//
// The pick's own columns are the entry as it was, read from the row it
// locked, not from a second read of entries joined to it: that join
// (issue 42) is planned before the limit is known, so a generic plan
// took a tenth of the pending entries for the pick's size and hashed a
// scan of every partition (0.75 s a lease with 95,000 entries, EXPLAIN
// ANALYZE under force_generic_plan), and custom plans cost 10 ms of
// planning a lease on the 90-day layout. The outer limit, a constant of
// the text (claimCap), bounds the planner's estimate of the pick, which
// the generic plan (claimPlanSets) otherwise takes for a tenth of the
// pending entries.
//
// bound ("" for none) is the lease's floor's bound (queue_floor.go): the
// pick and the update name it, so that the partitions below it are left
// out of the plan.
func (q *Queue) claim(ctx context.Context, tx *Tx, pick, bound string, n int, out []*touba.Delivery, took []takeOver,
	extra ...any) ([]*touba.Delivery, []takeOver, error) {
	b := &pgx.Batch{}
	for _, set := range claimPlanSets {
		b.Queue(set)
	}
	b.Queue(q.claimSQL(pick, bound, n), append([]any{q.db.now(), n, q.db.cfg.NodeID}, extra...)...)
	for _, reset := range claimPlanResets {
		b.Queue(reset)
	}
	br, err := tx.sendBatch(ctx, b)
	if err != nil {
		return out, took, err
	}
	defer br.Close()
	for range claimPlanSets {
		if _, err := br.Exec(); err != nil {
			return out, took, err
		}
	}
	if out, took, err = scanClaimed(br, out, took); err != nil {
		return out, took, err
	}
	for range claimPlanResets {
		if _, err := br.Exec(); err != nil {
			return out, took, err
		}
	}
	return out, took, br.Close()
}

// claimSQL is claim's statement.
func (q *Queue) claimSQL(pick, bound string, n int) string {
	within := ""
	if bound != "" {
		within = ` AND e.queue_id >= '` + bound + `'`
	}
	return `WITH old AS (SELECT * FROM (` + bounded(pick, bound) + `) p LIMIT ` + strconv.Itoa(claimCap(n)) + `)
		UPDATE touba.entries e SET status = 'running', attempts = e.attempts + 1, lease_owner = $3, last_node = $3, lease_expires_at = ` + q.db.dbExpiry() + `,
			lease_token = nextval('touba.lease_tokens'), updated_at = $1, leased = true,
			held = e.held AND e.hold_on IS NULL, hold_on = NULL
		FROM old WHERE e.queue_id = old.queue_id` + within + `
		RETURNING old.status, old.owner, NOT old.leased, ` + qualified("e.")
}

// scanClaimed reads a claim's leased entries from br.
func scanClaimed(br pgx.BatchResults, out []*touba.Delivery, took []takeOver) ([]*touba.Delivery, []takeOver, error) {
	rows, err := br.Query()
	if err != nil {
		return out, took, err
	}
	defer rows.Close()
	for rows.Next() {
		var was, oldOwner string
		var first bool
		d, err := scanEntry(prefixScanner{rows, []any{&was, &oldOwner, &first}})
		if err != nil {
			return out, took, err
		}
		// Never leased before: no run has written a checkpoint
		// (migration 0012), so the dispatcher skips reading them.
		d.FirstLease = first
		if was == touba.StatusRunning {
			took = append(took, takeOver{queueID: d.QueueID, oldOwner: oldOwner})
		}
		out = append(out, d)
	}
	return out, took, rows.Err()
}

// pickCols are the columns of every pick: the entry as the pick locked it.
const pickCols = `queue_id, status, COALESCE(lease_owner, '') AS owner, leased`

// claimCap is the constant limit of a claim of n: n rounded up to a
// power of two, at least 64, so that few texts (statements) serve every n.
func claimCap(n int) int {
	c := 64
	for c < n {
		c *= 2
	}
	return c
}
