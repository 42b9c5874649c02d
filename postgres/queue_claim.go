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
// The update is a second round trip, addressed to the partition each
// picked row is in (its tableoid, read by the pick): an update of the
// parent, joined to the pick, is one generic plan naming every leaf of
// entries, and PostgreSQL 15 locks every relation such a plan names
// before run-time pruning keeps one: on 90 days in 72 partitions the
// update opened and locked every leaf and index a second time (1,431
// relation locks a claim against 717 for the pick, two thirds of its
// 2.9-3.5 ms; issue 42). It is exact: the pick locked each row (FOR
// UPDATE), so none moves partition (a pass's move to entries_kept is an
// update of the row) or changes before this transaction ends.
func (q *Queue) claim(ctx context.Context, tx *Tx, pick string, n int, out []*touba.Delivery, took []takeOver,
	extra ...any) ([]*touba.Delivery, []takeOver, error) {
	picked, err := q.pickRows(ctx, tx, pick, n, extra)
	if err != nil || len(picked.order) == 0 {
		return out, took, err
	}
	b := &pgx.Batch{}
	now := q.db.now()
	for _, leaf := range picked.leaves {
		b.Queue(q.claimSQL(leaf), now, q.db.cfg.NodeID, picked.ids[leaf])
	}
	br, err := tx.sendBatch(ctx, b)
	if err != nil {
		return out, took, err
	}
	defer br.Close()
	leased := make(map[string]*touba.Delivery, len(picked.order))
	for range picked.leaves {
		if err := scanClaimed(br, leased); err != nil {
			return out, took, err
		}
	}
	if err := br.Close(); err != nil {
		return out, took, err
	}
	// In the pick's order (the oldest first), whatever the leaves'.
	for _, id := range picked.order {
		d, ok := leased[id]
		if !ok {
			continue
		}
		was := picked.byID[id]
		// Never leased before: no run has written a checkpoint
		// (migration 0012), so the dispatcher skips reading them.
		d.FirstLease = !was.leased
		if was.status == touba.StatusRunning {
			took = append(took, takeOver{queueID: id, oldOwner: was.owner})
		}
		out = append(out, d)
	}
	return out, took, nil
}

// pickedRow is a row a pick locked, as it was.
type pickedRow struct {
	status, owner string
	leased        bool
}

// picked are the rows a pick locked, by queue id and in its order, and
// their ids by the partition holding them (leaves in the order first met).
type picked struct {
	order  []string
	byID   map[string]pickedRow
	ids    map[string][]string
	leaves []string
}

// pickRows runs pick under claimPlanSets (one round trip, the settings
// given back after it).
func (q *Queue) pickRows(ctx context.Context, tx *Tx, pick string, n int, extra []any) (picked, error) {
	p := picked{byID: map[string]pickedRow{}, ids: map[string][]string{}}
	b := &pgx.Batch{}
	for _, set := range claimPlanSets {
		b.Queue(set)
	}
	b.Queue(pickSQL(pick, n), append([]any{q.db.now(), n, q.db.cfg.NodeID}, extra...)...)
	for _, reset := range claimPlanResets {
		b.Queue(reset)
	}
	br, err := tx.sendBatch(ctx, b)
	if err != nil {
		return p, err
	}
	defer br.Close()
	for range claimPlanSets {
		if _, err := br.Exec(); err != nil {
			return p, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return p, err
	}
	for rows.Next() {
		var id, leaf string
		var r pickedRow
		if err := rows.Scan(&id, &r.status, &r.owner, &r.leased, &leaf); err != nil {
			rows.Close()
			return p, err
		}
		if _, ok := p.ids[leaf]; !ok {
			p.leaves = append(p.leaves, leaf)
		}
		p.ids[leaf] = append(p.ids[leaf], id)
		p.order = append(p.order, id)
		p.byID[id] = r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return p, err
	}
	for range claimPlanResets {
		if _, err := br.Exec(); err != nil {
			return p, err
		}
	}
	return p, br.Close()
}

// pickSQL is pick bounded by claimCap(n). Every pick is sent the time
// ($1) and this node ($3) so that their extra arguments keep their
// numbers; the casts give those a pick does not read a type (the claim's
// update once did).
func pickSQL(pick string, n int) string {
	return `SELECT * FROM (` + pick + `) p WHERE $1::text IS NOT NULL AND $3::text IS NOT NULL LIMIT ` + strconv.Itoa(claimCap(n))
}

// claimSQL is claim's update of the picked rows ($3) in leaf, a table
// named by a pick's leaf column.
func (q *Queue) claimSQL(leaf string) string {
	return `UPDATE ` + leaf + ` e SET status = 'running', attempts = e.attempts + 1, lease_owner = $2, last_node = $2,
			lease_expires_at = ` + q.db.dbExpiry() + `, lease_token = nextval('touba.lease_tokens'), updated_at = $1, leased = true,
			held = e.held AND e.hold_on IS NULL, hold_on = NULL
		WHERE e.queue_id = ANY($3::text[])
		RETURNING ` + qualified("e.")
}

// scanClaimed reads a claim's leased entries from br into by.
func scanClaimed(br pgx.BatchResults, by map[string]*touba.Delivery) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		d, err := scanEntry(rows)
		if err != nil {
			return err
		}
		by[d.QueueID] = d
	}
	return rows.Err()
}

// pickCols are the columns of every pick: the entry as the pick locked
// it, and the partition it is in (claim's update names it).
const pickCols = `queue_id, status, COALESCE(lease_owner, '') AS owner, leased, e.tableoid::regclass::text AS leaf`

// claimCap is the constant limit of a claim of n: n rounded up to a
// power of two, at least 64, so that few texts (statements) serve every n.
func claimCap(n int) int {
	c := 64
	for c < n {
		c *= 2
	}
	return c
}
