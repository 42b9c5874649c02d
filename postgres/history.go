package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
)

// History is --history on the database (SPEC §8.1), behind
// touba.HistoryStore. Every node runs passes; the one that holds the
// maintenance lock does the work: it partitions the tables once every
// node knows how (history_partition_convert.go), creates partitions ahead,
// forgets the ranges wholly past the window (history_forget.go), and deletes,
// in small batches, what was kept and has since finished, and the rows of
// the small unpartitioned tables (waits, offers, cancel keys, audit
// events) whose entry is gone.
type History struct{ db *db }

// History returns the database's --history.
func (s *Store) History() *History { return &History{db: s.db} }

var _ touba.HistoryStore = (*History)(nil)

// Bounds of one pass.
const (
	rangesPerPass = 4   // ranges forgotten
	keptBatch     = 500 // kept entries forgotten per transaction
	keptPerPass   = 20  // such transactions
	sweepBatch    = 5000
)

// Prune runs one pass (touba.HistoryStore).
func (h *History) Prune(ctx context.Context, before time.Time) (touba.PruneReport, error) {
	d := h.db
	var rep touba.PruneReport
	width := PartitionWidth(d.cfg.History)
	if done, note, err := d.convert(ctx, width); err != nil || !done {
		if note != "" {
			d.log.Info().Msg(note)
		}
		return rep, err
	}
	// Before the partitions ahead: a table all of whose partitions an
	// earlier build detached has no index to copy for them.
	if attached, _, err := d.reattachOrphans(ctx); err != nil {
		return rep, err
	} else if len(attached) > 0 {
		d.hot.stale()
	}
	created, ok, err := d.ensureAhead(ctx, width)
	rep.Created = created
	if err != nil || !ok {
		if err == nil {
			// Another node maintains: the normal case of every node but
			// one, so only counted.
			rep.Skipped++
		}
		return rep, err
	}
	if rep.Partitions, err = d.finishLeftovers(ctx); err != nil {
		return rep, err
	}
	ranges, err := pastRanges(ctx, d.pool, before)
	if err != nil {
		return rep, err
	}
	for i, r := range ranges {
		if i == rangesPerPass {
			rep.More = true
			break
		}
		n, kept, dropped, err := d.forgetRange(ctx, r.leaves, r.from, r.to)
		if lockBusy(err) {
			// The freeze's CREATE TRIGGER or a row lock waited past its
			// lock_timeout behind the leases: nothing was done.
			rep.Skipped++
			d.log.Info().Err(err).Str("range", r.leaves["entries"]).Msg("the range waits for the next pass")
			continue
		}
		if err == errRangeBusy {
			d.log.Info().Str("range", r.leaves["entries"]).Msg(err.Error())
			continue
		}
		if err == errMaintBusy {
			// Nothing of the range was frozen, so nothing of it goes.
			rep.Skipped++
			rep.More = true
			d.log.Info().Str("range", r.leaves["entries"]).Msg(err.Error())
			break
		}
		rep.Entries, rep.Kept, rep.Partitions = rep.Entries+n, rep.Kept+kept, rep.Partitions+dropped
		if err != nil {
			return rep, err
		}
	}
	n, more, err := d.forgetKept(ctx, before)
	rep.Entries += n
	rep.More = rep.More || more
	if err == errMaintBusy {
		rep.Skipped++
		d.log.Info().Msg(err.Error())
	} else if err != nil {
		return rep, err
	}
	return rep, d.sweep(ctx)
}

// pastRange is one range of time partitions wholly before the window.
type pastRange struct {
	from, to int64
	leaves   rangeLeaves
}

// pastRanges lists the ranges whose upper bound is not after before,
// oldest first, with each table's partition of the range.
func pastRanges(ctx context.Context, q querier, before time.Time) ([]pastRange, error) {
	cut := before.UnixMilli()
	var out []pastRange
	index := map[[2]int64]int{}
	for _, t := range ptables {
		ls, err := leaves(ctx, q, t.rangeParent())
		if err != nil {
			return nil, err
		}
		for _, l := range ls {
			if l.other || l.pending || l.to > cut {
				continue
			}
			k := [2]int64{l.from, l.to}
			i, ok := index[k]
			if !ok {
				i = len(out)
				index[k] = i
				out = append(out, pastRange{from: l.from, to: l.to, leaves: rangeLeaves{}})
			}
			out[i].leaves[t.name] = l.name
		}
	}
	for i := 1; i < len(out); i++ { // insertion sort: a handful
		for k := i; k > 0 && out[k].from < out[k-1].from; k-- {
			out[k], out[k-1] = out[k-1], out[k]
		}
	}
	return out, nil
}

// forgetKept forgets, in small transactions, kept entries that finished
// since and are past the window, with their runs, checkpoints, effects,
// events and small-table rows: a DELETE, but of the few kept rows only.
func (d *db) forgetKept(ctx context.Context, before time.Time) (n int64, more bool, err error) {
	cut := touba.FormatTime(before)
	for range keptPerPass {
		var ids []string
		ok, err := d.maintTx(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL touba.history = 'on'`); err != nil {
				return err
			}
			aw, err := awaited(ctx, tx)
			if err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `SELECT queue_id FROM touba.entries e WHERE e.kept AND `+forgettable+`
				LIMIT $3 FOR UPDATE SKIP LOCKED`, cut, aw, keptBatch)
			if err != nil {
				return err
			}
			if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(ids) == 0 {
				return err
			}
			for _, t := range ptables[:4] {
				if _, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM touba.%s WHERE kept AND %s = ANY ($1)`, t.name, t.key), ids); err != nil {
					return fmt.Errorf("forget kept %s: %w", t.name, err)
				}
			}
			if err := deleteSmall(ctx, tx, ids); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `DELETE FROM touba.entries WHERE kept AND queue_id = ANY ($1)`, ids)
			return err
		})
		if err != nil {
			return n, false, fmt.Errorf("forget kept entries: %w", err)
		}
		if !ok {
			return n, true, errMaintBusy
		}
		crashpoint.Hit(CrashAfterKept)
		n += int64(len(ids))
		if len(ids) < keptBatch {
			return n, false, nil
		}
	}
	return n, true, nil
}

// deleteSmall deletes the rows of the small tables that belong to the
// entries ids.
func deleteSmall(ctx context.Context, tx pgx.Tx, ids []string) error {
	for _, stmt := range []string{
		`DELETE FROM touba.waits WHERE queue_id = ANY ($1)`,
		`DELETE FROM touba.offers WHERE queue_id = ANY ($1) OR consumed_by = ANY ($1)`,
		`DELETE FROM touba.cancel_keys WHERE queue_id = ANY ($1)`,
		`DELETE FROM touba.operator_events WHERE queue_id = ANY ($1)`,
		`DELETE FROM touba.gatherings WHERE carrier = ANY ($1)`,
	} {
		if _, err := tx.Exec(ctx, stmt, ids); err != nil {
			return fmt.Errorf("forget waits, offers, cancel keys, audit and gatherings: %w", err)
		}
	}
	return nil
}

// sweep deletes, in batches, the rows of the small tables whose entry a
// dropped partition took: those below the oldest time partition whose
// queue id is no entry's (the kept ones stay). schedule_cursors is never
// swept: a schedule's newest tick outlives its entry (issue 42).
func (d *db) sweep(ctx context.Context) error {
	var floor string
	err := d.pool.QueryRow(ctx, `SELECT COALESCE(MIN(queue_id), '') FROM (SELECT queue_id FROM touba.entries WHERE NOT kept
		ORDER BY queue_id LIMIT 1) e`).Scan(&floor)
	if err != nil || floor == "" {
		return err
	}
	for _, t := range []struct{ table, col string }{{"waits", "queue_id"}, {"offers", "queue_id"}, {"offers", "consumed_by"},
		{"cancel_keys", "queue_id"}, {"operator_events", "queue_id"}, {"gatherings", "carrier"}} {
		for {
			tag, err := d.pool.Exec(ctx, fmt.Sprintf(`DELETE FROM touba.%[1]s WHERE ctid IN (SELECT x.ctid FROM touba.%[1]s x
				WHERE x.%[2]s < $1 AND x.%[2]s <> '' AND NOT EXISTS (SELECT 1 FROM touba.entries e WHERE e.queue_id = x.%[2]s) LIMIT $2)`,
				t.table, t.col), floor, sweepBatch)
			if err != nil {
				return fmt.Errorf("sweep %s: %w", t.table, err)
			}
			if tag.RowsAffected() < sweepBatch {
				break
			}
		}
	}
	return nil
}

// smallTables are reported beside the partitioned ones.
var smallTables = []string{"waits", "offers", "cancel_keys", "operator_events"}

// Storage measures the database (touba.HistoryStore): each table's size
// with its partitions, indexes and TOAST, the oldest entries, and what a
// pass at before would drop.
func (h *History) Storage(ctx context.Context, before time.Time) (*touba.StorageReport, error) {
	d := h.db
	rep := &touba.StorageReport{Backend: "postgres"}
	all, err := allPartitioned(ctx, d.pool)
	if err != nil {
		return nil, err
	}
	if !all {
		if old, err := d.gate(ctx, d.pool); err != nil {
			return nil, err
		} else if old != "" {
			rep.Note = "tables not partitioned yet, nothing is forgotten: waiting for nodes of an older release to stop: " + old
		} else {
			rep.Note = "tables not partitioned yet: the next pass partitions them"
		}
	}
	if os, err := orphans(ctx, d.pool); err != nil {
		return nil, err
	} else if len(os) > 0 {
		var names []string
		for _, o := range os {
			names = append(names, o.name)
		}
		rep.Note = strings.TrimPrefix(rep.Note+"; ", "; ") + "detached tables whose rows no pass froze, attached again by the next pass " +
			"(the log says why when it cannot): " + strings.Join(names, ", ")
	}
	for _, t := range ptables {
		s := touba.StorageSize{Name: t.name, Kind: "table"}
		err := d.pool.QueryRow(ctx, `SELECT COALESCE(SUM(pg_total_relation_size(relid)), 0),
				COUNT(*) FILTER (WHERE isleaf AND level > 0 AND relid::regclass::text ~ '_p[0-9]')
			FROM pg_partition_tree(to_regclass($1))`, Schema+"."+t.name).Scan(&s.Bytes, &s.Partitions)
		if err != nil {
			return nil, fmt.Errorf("size of %s: %w", t.name, err)
		}
		rep.Sizes = append(rep.Sizes, s)
	}
	for _, name := range smallTables {
		s := touba.StorageSize{Name: name, Kind: "table"}
		if err := d.pool.QueryRow(ctx, `SELECT COALESCE(pg_total_relation_size(to_regclass($1)), 0)`, Schema+"."+name).Scan(&s.Bytes); err != nil {
			return nil, fmt.Errorf("size of %s: %w", name, err)
		}
		rep.Sizes = append(rep.Sizes, s)
	}
	var first *string
	if err := d.pool.QueryRow(ctx, `SELECT COUNT(*), MIN(created_at) FROM touba.offers WHERE consumed_by IS NULL`).Scan(&rep.Offers, &first); err != nil {
		return nil, fmt.Errorf("offers: %w", err)
	}
	if first != nil {
		if t, err := touba.ParseTime(*first); err == nil {
			rep.OldestOffer = &t
		}
	}
	var oldest, oldestLive string
	if err := d.pool.QueryRow(ctx, `SELECT COALESCE((SELECT queue_id FROM touba.entries ORDER BY queue_id LIMIT 1), ''),
		COALESCE((SELECT queue_id FROM touba.entries WHERE NOT kept ORDER BY queue_id LIMIT 1), '')`).Scan(&oldest, &oldestLive); err != nil {
		return nil, fmt.Errorf("oldest entries: %w", err)
	}
	if ms, ok := msOf(oldest); ok {
		t := time.UnixMilli(ms).UTC()
		rep.OldestEntry = &t
	}
	// Also before the partitioning: while it waits, nothing is forgotten,
	// and the alert on this age says so.
	if ms, ok := msOf(oldestLive); ok {
		t := time.UnixMilli(ms).UTC()
		rep.OldestFinished = &t
	}
	if before.IsZero() || !all {
		return rep, nil
	}
	ranges, err := pastRanges(ctx, d.pool, before)
	if err != nil {
		return nil, err
	}
	for _, r := range ranges {
		for _, leaf := range r.leaves {
			var size int64
			if err := d.pool.QueryRow(ctx, `SELECT pg_total_relation_size(to_regclass($1))`, Schema+"."+leaf).Scan(&size); err != nil {
				return nil, err
			}
			rep.FreedBytes += size
			rep.Partitions++
			if leaf == r.leaves["entries"] {
				// Counted: a range past the window lasts until the next
				// pass, so this is rare. Its unfinished entries stay.
				var rows int64
				if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM touba.`+leaf+` WHERE status IN `+finishedSQL).Scan(&rows); err != nil {
					return nil, err
				}
				rep.Forgettable += rows
			}
		}
	}
	return rep, nil
}
