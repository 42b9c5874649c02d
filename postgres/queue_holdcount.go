package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
)

// Held entries, counted where they change (migrations/0018_hold_counts.sql):
// triggers on entries add +1/-1 rows to hold_deltas in the transaction of
// each change; a node folds them into hold_counts each second, and recounts
// hold_counts from the entries at start-up and every holdRecountEvery.
// What a reader gets is hold_counts plus hold_deltas, summed in one
// snapshot: exact whether or not the deltas were folded, at a cost that
// does not grow with the held entries (a few rows a binding and trigger).
// Before, each node's dispatcher counted them with a GROUP BY over every
// held entry each second (4.9 ms at 20,000, linear), as did the
// --max-pending count.

// holdLock is the advisory lock (transaction level) under which one node
// at a time folds or recounts.
const holdLock = 0x746f75626163 // "toubac"

// holdRecountEvery is how often a node recounts the held entries from the
// entries themselves: what no trigger saw (a partition attached again with
// its rows, writes with triggers off) is corrected within it.
var holdRecountEvery = 5 * time.Minute

// Kinds of hold_counts, as touba_count_holds() names them.
const (
	holdKey     = "key"
	holdSlot    = "slot"
	holdCircuit = "circuit"
)

// heldCount is one row of the held counts: n entries of trigger ref held
// on hold (a binding's ref, "" for kind key) for kind.
type heldCount struct {
	ref, hold, kind string
	n               int64
}

// readHolds sums hold_counts and the deltas not folded yet, in one
// snapshot.
const readHolds = `SELECT trigger_ref, hold_on, kind, SUM(n)::bigint FROM (
		SELECT trigger_ref, hold_on, kind, n FROM touba.hold_counts
		UNION ALL SELECT trigger_ref, hold_on, kind, n FROM touba.hold_deltas) c
	GROUP BY trigger_ref, hold_on, kind HAVING SUM(n) <> 0`

// heldCounts reads the held counts.
func (q *Queue) heldCounts(ctx context.Context) ([]heldCount, error) {
	rows, err := q.db.pool.Query(ctx, readHolds)
	if err != nil {
		return nil, err
	}
	var out []heldCount
	var c heldCount
	_, err = pgx.ForEachRow(rows, []any{&c.ref, &c.hold, &c.kind, &c.n}, func() error { out = append(out, c); return nil })
	return out, err
}

// foldHolds moves the deltas into hold_counts, unless another node is
// folding or recounting (ok false). The deltas a statement sees are the
// ones it deletes and adds: those committed later stay for the next fold.
func (q *Queue) foldHolds(ctx context.Context) (ok bool, err error) {
	err = pgx.BeginFunc(ctx, q.db.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, holdLock).Scan(&ok); err != nil || !ok {
			return err
		}
		if _, err := tx.Exec(ctx, `WITH d AS (DELETE FROM touba.hold_deltas RETURNING trigger_ref, hold_on, kind, n)
			INSERT INTO touba.hold_counts (trigger_ref, hold_on, kind, n)
			SELECT trigger_ref, hold_on, kind, SUM(n) FROM d GROUP BY trigger_ref, hold_on, kind
			ON CONFLICT (trigger_ref, hold_on, kind) DO UPDATE SET n = touba.hold_counts.n + EXCLUDED.n`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM touba.hold_counts WHERE n = 0`)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("fold the held counts: %w", err)
	}
	return ok, nil
}

// recountHolds sets hold_counts to a count of the held entries, waiting
// for another node's fold or recount to end. One statement counts the
// entries and deletes the deltas, in one snapshot: a change committed
// before it is in the count and its delta gone, one committed after it is
// not counted and its delta stays.
func (q *Queue) recountHolds(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, q.db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, holdLock); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `WITH gone AS (DELETE FROM touba.hold_deltas)
			SELECT trigger_ref, COALESCE(hold_on, ''), touba.hold_kind(hold_on, error_code), COUNT(*) FROM touba.entries
			WHERE status = 'pending' AND (held OR hold_on IS NOT NULL) GROUP BY 1, 2, 3`)
		if err != nil {
			return err
		}
		var refs, holds, kinds []string
		var ns []int64
		var c heldCount
		if _, err := pgx.ForEachRow(rows, []any{&c.ref, &c.hold, &c.kind, &c.n}, func() error {
			refs, holds, kinds, ns = append(refs, c.ref), append(holds, c.hold), append(kinds, c.kind), append(ns, c.n)
			return nil
		}); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM touba.hold_counts`); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO touba.hold_counts (trigger_ref, hold_on, kind, n)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[])`, refs, holds, kinds, ns)
		return err
	})
	if err != nil {
		return fmt.Errorf("recount the held entries: %w", err)
	}
	q.recountedAt.Store(time.Now().UnixNano())
	return nil
}

// tendHolds is the queue's per-second upkeep of the counts: a recount when
// one is due (given longer than ctx: it reads every held entry), else a
// fold.
func (q *Queue) tendHolds(ctx context.Context) error {
	if time.Since(time.Unix(0, q.recountedAt.Load())) >= holdRecountEvery {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		return q.recountHolds(ctx)
	}
	_, err := q.foldHolds(ctx)
	return err
}

// HeldRuns counts the entries handed back, by hold and trigger.
func (q *Queue) HeldRuns(ctx context.Context) (map[string]map[string]int64, error) {
	cs, err := q.heldCounts(ctx)
	if err != nil {
		return nil, fmt.Errorf("held runs: %w", err)
	}
	out := map[string]map[string]int64{}
	for _, c := range cs {
		if c.kind == holdKey || c.n <= 0 {
			continue
		}
		if out[c.hold] == nil {
			out[c.hold] = map[string]int64{}
		}
		out[c.hold][c.ref] += c.n
	}
	return out, nil
}

// CountByTrigger counts the active entries of each trigger by status;
// pending entries held back behind their concurrency key count as "held",
// those handed back on a binding as touba.HeldSlot or touba.HeldCircuit.
// The held ones are the counts' (they are pending too); the others are
// read through entries_ready_trigger and entries_ready, which hold none
// of them.
func (q *Queue) CountByTrigger(ctx context.Context) (map[string]map[string]int64, error) {
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
	// One statement, so one snapshot: a run handed back meanwhile is
	// counted running or held, never both or neither.
	rows, err := q.db.pool.Query(ctx, `SELECT trigger_ref, status, COUNT(*), '' FROM touba.entries
			WHERE status IN ('running', 'waiting') OR status = 'pending' AND NOT held GROUP BY trigger_ref, status
		UNION ALL SELECT trigger_ref, 'pending', SUM(n)::bigint, kind FROM (
			SELECT trigger_ref, kind, n FROM touba.hold_counts UNION ALL SELECT trigger_ref, kind, n FROM touba.hold_deltas) c
			GROUP BY trigger_ref, kind`)
	if err == nil {
		var ref, st, kind string
		var n int64
		_, err = pgx.ForEachRow(rows, []any{&ref, &st, &n, &kind}, func() error {
			add(ref, st, n)
			if kind != "" {
				add(ref, heldReason(kind), n)
			}
			return nil
		})
	}
	if err != nil {
		return nil, fmt.Errorf("count by trigger: %w", err)
	}
	return out, nil
}

// heldReason is CountByTrigger's key of a kind of hold.
func heldReason(kind string) string {
	switch kind {
	case holdSlot:
		return touba.HeldSlot
	case holdCircuit:
		return touba.HeldCircuit
	}
	return "held"
}

// pendingNow counts the pending entries: those not held through
// entries_ready, the held ones from the counts.
func (q *Queue) pendingNow(ctx context.Context) (int64, error) {
	var n int64
	err := q.db.pool.QueryRow(ctx, `SELECT (SELECT COUNT(*) FROM touba.entries WHERE status = 'pending' AND NOT held)
		+ COALESCE((SELECT SUM(n) FROM touba.hold_counts), 0) + COALESCE((SELECT SUM(n) FROM touba.hold_deltas), 0)`).Scan(&n)
	return n, err
}
