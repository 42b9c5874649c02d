package queue

import (
	"context"
	"fmt"

	touba "github.com/touba/touba-trigger"
)

// Held entries, counted where they change: the triggers of
// schema/0012_hold_counts.sql keep hold_counts, by trigger, hold (a
// binding's ref, "" for a key's hold) and kind, in the statement that
// changes an entry. HeldRuns and CountByTrigger read those few rows
// instead of every held entry (at 100,000 held: 130 ms a read for
// HeldRuns, 180 ms for CountByTrigger, on the reading connection).

// qHoldCounts is the held counts, those not zero.
const qHoldCounts = `SELECT trigger_ref, hold_on, kind, n FROM hold_counts WHERE n <> 0`

// HeldRuns counts the entries handed back, by hold and trigger.
func (q *Queue) HeldRuns(ctx context.Context) (map[string]map[string]int64, error) {
	rows, err := q.db.Read.QueryContext(ctx, qHoldCounts+` AND kind <> 'key'`)
	if err != nil {
		return nil, fmt.Errorf("held runs: %w", err)
	}
	defer rows.Close()
	out := map[string]map[string]int64{}
	for rows.Next() {
		var ref, hold, kind string
		var n int64
		if err := rows.Scan(&ref, &hold, &kind, &n); err != nil {
			return nil, fmt.Errorf("held runs: %w", err)
		}
		if out[hold] == nil {
			out[hold] = map[string]int64{}
		}
		out[hold][ref] += n
	}
	return out, rows.Err()
}

// CountByTrigger counts the entries of each trigger by status; pending
// entries held back behind their concurrency key count as "held" too,
// those handed back on a binding as touba.HeldSlot or touba.HeldCircuit.
// The held ones are hold_counts' (they are pending too), the others are
// read through entries_ready_trigger and entries_status, which hold none
// of them; one statement, so one snapshot.
func (q *Queue) CountByTrigger(ctx context.Context) (map[string]map[string]int64, error) {
	rows, err := q.db.Read.QueryContext(ctx, `SELECT trigger_ref, 'pending', COUNT(*), '' FROM entries INDEXED BY entries_ready_trigger
			WHERE status = 'pending' AND held = 0 GROUP BY trigger_ref
		UNION ALL SELECT trigger_ref, status, COUNT(*), '' FROM entries WHERE status IN ('running', 'waiting') GROUP BY trigger_ref, status
		UNION ALL SELECT trigger_ref, 'pending', SUM(n), kind FROM hold_counts WHERE n <> 0 GROUP BY trigger_ref, kind`)
	if err != nil {
		return nil, fmt.Errorf("count by trigger: %w", err)
	}
	defer rows.Close()
	out := map[string]map[string]int64{}
	add := func(ref, key string, n int64) {
		if n == 0 {
			return
		}
		if out[ref] == nil {
			out[ref] = map[string]int64{}
		}
		out[ref][key] += n
	}
	for rows.Next() {
		var ref, st, kind string
		var n int64
		if err := rows.Scan(&ref, &st, &n, &kind); err != nil {
			return nil, fmt.Errorf("count by trigger: %w", err)
		}
		add(ref, st, n)
		switch kind {
		case "key":
			add(ref, "held", n)
		case "slot":
			add(ref, touba.HeldSlot, n)
		case "circuit":
			add(ref, touba.HeldCircuit, n)
		}
	}
	return out, rows.Err()
}
