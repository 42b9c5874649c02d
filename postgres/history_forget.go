package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/touba/touba-trigger/internal/crashpoint"
)

// Forgetting one range of queue ids [from, to), wholly past --history
// (SPEC §8.1), by the node holding the maintenance lock:
//
//  1. one transaction freezes the range's partitions (touba.forgetting():
//     no row enters them, no finished entry runs again), moves to the kept
//     partitions what must stay (keepClause) with all its runs,
//     checkpoints, effects and events, and checks that nothing else must:
//     a row locked by a run at that moment is skipped, and the range waits
//     for a later pass;
//  2. each partition is detached CONCURRENTLY (SHARE UPDATE EXCLUSIVE on
//     its parent: no read or write waits), what refers to an entry before
//     the entry, so a crash between two leaves no effect without its
//     entry, only frozen entries without theirs, which the next pass drops;
//  3. and dropped: no DELETE of its rows, nothing left for vacuum.
//
// A pass that died between the steps is finished by the next one: a
// partition left detaching is finalized, one detached is dropped (each
// carries the comment forgettingMark).

// Crash points of a pass, for tests that kill the node between its steps.
const (
	CrashAfterFreeze = "history.pg.after_freeze" // range frozen and what stays moved; nothing detached
	CrashMidDetach   = "history.pg.mid_detach"   // some partitions of the range detached
	CrashAfterDetach = "history.pg.after_detach" // all detached, none dropped
	CrashAfterKept   = "history.pg.after_kept"   // kept rows forgotten, commit done
	forgettingMark   = "touba: being forgotten (--history)"
)

// finishedSQL is touba.FinishedStatuses in SQL.
const finishedSQL = `('done', 'cancelled', 'merged')`

// awaitedSQL lists the triggers with an unfinished entry: one of them may
// still reach a wait_for and take an offer made for it (SPEC §2.3).
const awaitedSQL = `SELECT DISTINCT trigger_ref FROM touba.entries WHERE status IN ('pending', 'running', 'waiting', 'parked')`

// unread is the condition, on the finished entry e, that no wait may still
// read its body and headers: it holds no unconsumed offer for a trigger in
// awaited (an array or a subquery, awaitedSQL: an entry of one may still
// take it, SPEC §2.3), and no wait of an unfinished entry matched it (the
// wait's output is read from e when its entry runs again, SPEC §2.3 and
// issue 42). --history (forgettable) and --retention (PurgeBodies) both
// keep what it refuses.
func unread(awaited string) string {
	return `NOT EXISTS (SELECT 1 FROM touba.offers o WHERE o.queue_id = e.queue_id AND o.consumed_by IS NULL
		AND split_part(o.key, '#', 1) = ANY (` + awaited + `))
	AND NOT EXISTS (SELECT 1 FROM touba.waits w JOIN touba.entries x ON x.queue_id = w.queue_id
		WHERE w.matched_queue_id = e.queue_id AND x.status NOT IN ` + finishedSQL + `)`
}

// forgettable is the condition under which the kept entry e goes: it has
// finished, was accepted before $1, has no effect unsettled, no wait may
// still read it (unread, with $2 the triggers with unfinished entries),
// and it is not merged into an unfinished carrier.
var forgettable = `e.status IN ` + finishedSQL + ` AND e.received_at < $1
	AND NOT EXISTS (SELECT 1 FROM touba.effects f WHERE f.scope = e.queue_id AND f.state IN ('prepared', 'dispatched', 'unknown'))
	AND ` + unread(`$2::text[]`) + `
	AND NOT EXISTS (SELECT 1 FROM touba.entries c WHERE c.queue_id = e.merged_into AND c.status NOT IN ` + finishedSQL + `)`

// unfinishedSQL are the states of entries that may still run: a
// partition's entries in them are kept. Read through each partition's
// status index: a state added later must be added here.
const unfinishedSQL = `('pending', 'running', 'waiting', 'failed', 'parked')`

// keepOf selects, in the range [$1, $2) whose entries and effects
// partitions are entries and effects, the queue ids --history must keep:
// entries not finished (failed and parked ones wait for an operator), or
// with an effect not settled, or holding an unconsumed offer for a
// trigger in $3 (one with unfinished entries: one of them may still wait
// for it, SPEC §2.3), or matched by the wait of an unfinished entry (its
// output is read from the entry when the wait ends), or merged into a
// carrier not finished (its run reads them in /events). A finished carrier
// kept for another reason (an effect not settled) keeps only itself, as on
// SQLite: asking for its kept state here would find, after this range's
// carriers moved, merged rows left behind, and the range would never go.
// Each through an index: the partition itself is not read.
func keepOf(entries, effects string) string {
	q := `SELECT queue_id FROM touba.` + entries + ` WHERE status IN ` + unfinishedSQL
	if effects != "" {
		q += ` UNION SELECT scope FROM touba.` + effects + ` WHERE state IN ('prepared', 'dispatched', 'unknown')`
	}
	return q + ` UNION SELECT queue_id FROM touba.offers WHERE queue_id >= $1 AND queue_id < $2 AND consumed_by IS NULL
			AND split_part(key, '#', 1) = ANY ($3::text[])
		UNION SELECT w.matched_queue_id FROM touba.waits w JOIN touba.entries x ON x.queue_id = w.queue_id
			WHERE w.matched_queue_id >= $1 AND w.matched_queue_id < $2 AND x.status NOT IN ` + finishedSQL + `
		UNION SELECT m.queue_id FROM touba.` + entries + ` m JOIN touba.entries c ON c.queue_id = m.merged_into
			WHERE m.merged_into IS NOT NULL AND c.status NOT IN ` + finishedSQL
}

// awaited lists the triggers with an unfinished entry.
func awaited(ctx context.Context, q querier) ([]string, error) {
	rows, err := q.Query(ctx, awaitedSQL)
	if err != nil {
		return nil, fmt.Errorf("awaited triggers: %w", err)
	}
	refs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if refs == nil {
		refs = []string{}
	}
	return refs, err
}

// errRangeBusy: a row the range must keep was locked by someone else;
// the range waits for a later pass.
var errRangeBusy = errors.New("a row to keep is locked by a run; the range waits for the next pass")

// rangeLeaves are the partitions of one range, by table.
type rangeLeaves map[string]string

// errMaintBusy: the maintenance lock was held elsewhere (another node's
// pass, or an insert creating the partition it needs) when a step of the
// pass needed it; the pass stops there, and the next one goes on.
var errMaintBusy = errors.New("the maintenance lock is held elsewhere; the pass stops and the next one goes on")

// beforeFreeze is a test's hook, run before each range's freeze.
var beforeFreeze func()

// freezeRange is step 1 for the range r. It returns errMaintBusy, having
// done nothing, when it could not take the maintenance lock: then the
// range is neither frozen nor marked, and detachLeaf refuses it.
func (d *db) freezeRange(ctx context.Context, r rangeLeaves, from, to int64) (moved int64, err error) {
	if beforeFreeze != nil {
		beforeFreeze()
	}
	ok, err := d.maintTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL touba.history = 'on'`); err != nil {
			return err
		}
		// Under the lock no pass drops a partition: one gone was dropped
		// by another node's pass since this one listed the range, after
		// a freeze that kept what stays. The others are frozen as usual.
		live := rangeLeaves{}
		for name, leaf := range r {
			var ok bool
			if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, Schema+"."+leaf).Scan(&ok); err != nil {
				return err
			} else if ok {
				live[name] = leaf
			}
		}
		r = live
		for _, t := range ptables {
			leaf := r[t.name]
			if leaf == "" {
				continue
			}
			if t.kept {
				if _, err := tx.Exec(ctx, fmt.Sprintf(`DO $$ BEGIN
					IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'touba.%s'::regclass AND tgname = 'history_forgetting') THEN
						CREATE TRIGGER history_forgetting BEFORE INSERT OR UPDATE ON touba.%s FOR EACH ROW EXECUTE FUNCTION touba.forgetting();
					END IF; END $$`, leaf, leaf), pgx.QueryExecModeSimpleProtocol); err != nil {
					return fmt.Errorf("freeze %s: %w", leaf, err)
				}
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(`COMMENT ON TABLE touba.%s IS %s`, leaf, quote(forgettingMark))); err != nil {
				return fmt.Errorf("mark %s: %w", leaf, err)
			}
		}
		aw, err := awaited(ctx, tx)
		if err != nil {
			return err
		}
		lo, hi := boundText(from), boundText(to)
		if leaf := r["entries"]; leaf != "" {
			keep := keepOf(leaf, r["effects"])
			tag, err := tx.Exec(ctx, `UPDATE touba.entries SET kept = true WHERE queue_id IN (
				SELECT e.queue_id FROM touba.`+leaf+` e WHERE e.queue_id IN (`+keep+`) FOR UPDATE OF e SKIP LOCKED)`, lo, hi, aw)
			if err != nil {
				return fmt.Errorf("keep entries of %s: %w", leaf, err)
			}
			moved = tag.RowsAffected()
			var left bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM touba.`+leaf+` e WHERE e.queue_id IN (`+keep+`))`, lo, hi, aw).Scan(&left); err != nil {
				return err
			} else if left {
				return errRangeBusy
			}
		}
		for _, t := range ptables[:4] { // the entries' runs, checkpoints, effects, events
			if r[t.name] == "" {
				continue
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE touba.%s SET kept = true WHERE NOT kept AND %s >= $1 AND %s < $2
				AND %s IN (SELECT queue_id FROM touba.entries WHERE kept AND queue_id >= $1 AND queue_id < $2)`, t.name, t.key, t.key, t.key),
				lo, hi); err != nil {
				return fmt.Errorf("keep %s: %w", t.name, err)
			}
		}
		return nil
	})
	if err == nil && !ok {
		return 0, errMaintBusy
	}
	return moved, err
}

// detachLeaf is step 2 for one partition, on a connection of its own
// (DETACH ... CONCURRENTLY runs in no transaction); a detach left pending
// by a pass that stopped is finalized. It detaches only a partition that
// a freeze committed, as its mark says: one not frozen may hold rows that
// must stay, and a detached table is read by nothing.
func (d *db) detachLeaf(ctx context.Context, t ptable, leaf string, pending bool) error {
	if !pending {
		var frozen, attached bool
		if err := d.pool.QueryRow(ctx, `SELECT COALESCE(obj_description(c.oid, 'pg_class') = $2, false), c.relispartition
			FROM pg_class c WHERE c.oid = to_regclass($1)`, Schema+"."+leaf, forgettingMark).Scan(&frozen, &attached); err == pgx.ErrNoRows {
			return nil // dropped by another node's pass, which froze it again
		} else if err != nil {
			return fmt.Errorf("detach %s: %w", leaf, err)
		}
		if !frozen {
			return fmt.Errorf("detach %s: refused, the partition is not frozen", leaf)
		}
		if !attached {
			return nil // detached by another node's pass
		}
	}
	if beforeDetach != nil {
		beforeDetach(leaf)
	}
	conn, err := (&migrator{pool: d.pool, timeout: d.cfg.Timeout, pooled: d.pooled, log: d.log}).onlineConn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	how := "CONCURRENTLY"
	if pending {
		how = "FINALIZE"
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf(`ALTER TABLE touba.%s DETACH PARTITION touba.%s %s`, t.rangeParent(), leaf, how),
		pgx.QueryExecModeSimpleProtocol); err != nil {
		// Another node's pass, which froze it again, detached or dropped
		// it since the check above, or is detaching it (no lock keeps two
		// detaches apart; one left pending is finalized by a later pass).
		var attached, other bool
		var pe *pgconn.PgError
		if rerr := d.pool.QueryRow(ctx, `SELECT c.relispartition, EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid AND i.inhdetachpending)
			FROM pg_class c WHERE c.oid = to_regclass($1)`, Schema+"."+leaf).Scan(&attached, &other); rerr == pgx.ErrNoRows ||
			(rerr == nil && (!attached || (other && !pending && errors.As(err, &pe) && pe.Code == "55000"))) {
			return nil
		}
		return fmt.Errorf("detach %s: %w", leaf, err)
	}
	return nil
}

// beforeDetach is a test's hook, run before each partition's detach
// statement.
var beforeDetach func(leaf string)

// dropDetached is step 3: it drops the detached partitions marked as
// being forgotten (of this pass, or one that stopped), and returns how
// many.
func (d *db) dropDetached(ctx context.Context) (int, error) {
	n := 0
	_, err := d.maintTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
			WHERE s.nspname = $1 AND c.relkind = 'r' AND NOT c.relispartition AND obj_description(c.oid, 'pg_class') = $2`,
			Schema, forgettingMark)
		if err != nil {
			return err
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, name := range names {
			if _, err := tx.Exec(ctx, `DROP TABLE touba.`+name); err != nil {
				return fmt.Errorf("drop %s: %w", name, err)
			}
			n++
		}
		return nil
	})
	return n, err
}

// relationGone tells an error on a table that no longer exists.
func relationGone(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}

// forgetRange runs the three steps for r and returns the entries it
// forgot, those it kept, and the partitions it dropped.
func (d *db) forgetRange(ctx context.Context, r rangeLeaves, from, to int64) (entries, kept int64, dropped int, err error) {
	if kept, err = d.freezeRange(ctx, r, from, to); err != nil {
		return 0, 0, 0, err
	}
	crashpoint.Hit(CrashAfterFreeze)
	if leaf := r["entries"]; leaf != "" {
		// Frozen: the count holds until the partition is dropped.
		// Gone: another node's pass, which froze it again, dropped it
		// since (and counted its entries).
		if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM touba.`+leaf).Scan(&entries); err != nil && !relationGone(err) {
			return 0, kept, 0, err
		}
	}
	for i, t := range ptables {
		if r[t.name] == "" {
			continue
		}
		if err := d.detachLeaf(ctx, t, r[t.name], false); err != nil {
			return 0, kept, 0, err
		}
		if i == 1 {
			crashpoint.Hit(CrashMidDetach)
		}
	}
	crashpoint.Hit(CrashAfterDetach)
	d.hot.stale()
	dropped, err = d.dropDetached(ctx)
	return entries, kept, dropped, err
}

// finishLeftovers ends what a pass that stopped left: detaches pending,
// and partitions detached but not dropped.
func (d *db) finishLeftovers(ctx context.Context) (int, error) {
	for _, t := range ptables {
		ls, err := leaves(ctx, d.pool, t.rangeParent())
		if err != nil {
			return 0, err
		}
		for _, l := range ls {
			if l.pending {
				if err := d.detachLeaf(ctx, t, l.name, true); err != nil {
					return 0, err
				}
			}
		}
	}
	return d.dropDetached(ctx)
}
