package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ensureRange creates, for every table, partitions for the slots of the
// width grid that meet [from, to) (ms) and no partition covers yet: gaps
// only, so partitions of another width (--history changed) never overlap.
// It returns how many it created.
func ensureRange(ctx context.Context, q querier, width time.Duration, from, to int64) (int, error) {
	w := width.Milliseconds()
	created := 0
	for _, t := range ptables {
		ls, err := leaves(ctx, q, t.rangeParent())
		if err != nil {
			return created, err
		}
		src := ""
		var spans [][2]int64
		for _, l := range ls {
			if l.other {
				continue
			}
			spans = append(spans, [2]int64{l.from, l.to})
			if !l.pending {
				src = l.name // the newest: its indexes are the template
			}
		}
		if src == "" {
			return created, fmt.Errorf("no partition of %s to copy indexes from", t.name)
		}
		for s := floorTo(from, w); s < to; s += w {
			for _, g := range gaps(s, s+w, spans) {
				if err := createLeaf(ctx, q, t, leafName(t, g[0]), src, quote(idAt(g[0])), quote(idAt(g[1]))); err != nil {
					return created, err
				}
				spans = append(spans, g)
				created++
			}
		}
	}
	return created, nil
}

// floorTo is ms down to a multiple of w.
func floorTo(ms, w int64) int64 {
	if ms < 0 {
		return -((-ms + w - 1) / w) * w
	}
	return ms / w * w
}

// gaps is [from, to) less the spans.
func gaps(from, to int64, spans [][2]int64) [][2]int64 {
	out := [][2]int64{{from, to}}
	for _, sp := range spans {
		var next [][2]int64
		for _, g := range out {
			if sp[1] <= g[0] || sp[0] >= g[1] {
				next = append(next, g)
				continue
			}
			if g[0] < sp[0] {
				next = append(next, [2]int64{g[0], sp[0]})
			}
			if sp[1] < g[1] {
				next = append(next, [2]int64{sp[1], g[1]})
			}
		}
		out = next
	}
	return out
}

// ensureAhead creates the partitions from now to now plus partitionAhead,
// when this node gets the maintenance lock (created 0 and ok false when
// another node holds it: that node creates them).
func (d *db) ensureAhead(ctx context.Context, width time.Duration) (created int, ok bool, err error) {
	now := d.cfg.Now().UnixMilli()
	ok, err = d.maintTx(ctx, func(tx pgx.Tx) error {
		var err error
		created, err = ensureRange(ctx, tx, width, now, now+partitionAhead(width).Milliseconds())
		return err
	})
	if created > 0 {
		d.hot.stale()
	}
	return created, ok, err
}

// noPartition tells an insert that found no partition for its row: an id
// past the partitions created ahead (a node's clock far ahead, or all
// nodes stopped longer than partitionAhead).
func noPartition(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23514" && strings.Contains(pe.Message, "no partition of relation")
}

// ensureNow creates the partitions of now (and ahead), waiting for the
// maintenance lock: what an insert that met noPartition does before it
// tries again.
func (d *db) ensureNow(ctx context.Context) error {
	width := PartitionWidth(d.cfg.History)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		n, ok, err := d.ensureAhead(ctx, width)
		if (err != nil && !lockBusy(err)) || (err == nil && ok) {
			if n > 0 {
				d.log.Warn().Int("created", n).Msg("created partitions an insert needed (were the nodes stopped, or a clock ahead?)")
			}
			return err
		}
		// Another node holds the maintenance lock (it creates them), or a
		// parent was busy past the lock_timeout: again shortly.
		if err := sleepCtx(ctx, wait); err != nil {
			return err
		}
	}
}

// openPartitions is Open's part: a database with no entry and no log row
// yet (a new one) is partitioned at once, when every live node knows how
// (no row is then in the way: it takes an instant); partitions are made
// ahead when it is partitioned. A database with rows is partitioned by a
// --history pass, online (history_partition_convert.go).
func (d *db) openPartitions(ctx context.Context) error {
	width := PartitionWidth(d.cfg.History)
	all, err := allPartitioned(ctx, d.pool)
	if err != nil {
		return fmt.Errorf("partitions: %w", err)
	}
	if !all {
		var empty bool
		if err := d.pool.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM touba.entries) AND NOT EXISTS (SELECT 1 FROM touba.deliveries)`).Scan(&empty); err != nil || !empty {
			return err
		}
		if _, _, err := d.convert(ctx, width); err != nil {
			return fmt.Errorf("partition the new database: %w", err)
		}
		return nil
	}
	// At start-up, not only at the first pass: a node run without
	// --history has no pass, and the entries of such a table are an
	// operator's to see. First: a table all of whose partitions were
	// detached has no index to copy for the ones ahead.
	if _, _, err := d.reattachOrphans(ctx); err != nil {
		d.log.Warn().Err(err).Msg("attach again partitions detached without their freeze")
	}
	if _, _, err := d.ensureAhead(ctx, width); err != nil {
		d.log.Warn().Err(err).Msg("create partitions ahead")
	}
	return nil
}
