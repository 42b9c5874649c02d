package postgres

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Orphans: a time partition detached without its freeze. A build before
// this one detached a range even when its freeze had been skipped (the
// maintenance lock busy), leaving tables that nothing read or dropped,
// which held failed, parked and waiting entries (issue 42). Such a table
// has no forgettingMark; each is attached again to the bounds its detach
// recorded, so its entries are listed again and the next pass forgets
// what the rule lets go. One that cannot be attached is logged and shown
// by storage, never dropped.

// orphanName matches the name of a time partition or of the table as it
// was before the partitioning, of any partitioned table.
var orphanName = func() *regexp.Regexp {
	var names []string
	for _, t := range ptables {
		names = append(names, t.name)
	}
	return regexp.MustCompile(`^(` + strings.Join(names, "|") + `)_(p[0-9][0-9t]*|old)$`)
}()

// orphan is one detached table not being forgotten.
type orphan struct {
	name string
	t    ptable
}

// orphans lists the detached tables of the schema that no freeze marked.
func orphans(ctx context.Context, q querier) ([]orphan, error) {
	rows, err := q.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
		WHERE s.nspname = $1 AND c.relkind = 'r' AND NOT c.relispartition
			AND COALESCE(obj_description(c.oid, 'pg_class'), '') <> $2`, Schema, forgettingMark)
	if err != nil {
		return nil, fmt.Errorf("detached tables: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("detached tables: %w", err)
	}
	var out []orphan
	for _, name := range names {
		g := orphanName.FindStringSubmatch(name)
		if g == nil {
			continue
		}
		for _, t := range ptables {
			if t.name == g[1] {
				out = append(out, orphan{name: name, t: t})
			}
		}
	}
	return out, nil
}

// detachedBounds reads the bounds DETACH ... CONCURRENTLY recorded on the
// table as a CHECK constraint (its partition constraint), as FOR VALUES
// bounds; ok is false when there is none.
func detachedBounds(ctx context.Context, q querier, o orphan) (bounds string, ok bool, err error) {
	rows, err := q.Query(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'c'`,
		Schema+"."+o.name)
	if err != nil {
		return "", false, err
	}
	defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", false, err
	}
	key := regexp.QuoteMeta(o.t.key)
	lower := regexp.MustCompile(`\(` + key + ` >= ('[^']*')::text\)`)
	upper := regexp.MustCompile(`\(` + key + ` < ('[^']*')::text\)`)
	for _, def := range defs {
		hi := upper.FindStringSubmatch(def)
		if hi == nil {
			continue
		}
		lo := "MINVALUE"
		if g := lower.FindStringSubmatch(def); g != nil {
			lo = g[1]
		}
		return fmt.Sprintf("FROM (%s) TO (%s)", lo, hi[1]), true, nil
	}
	return "", false, nil
}

// reattachOrphans attaches every orphan again, under the maintenance lock
// (skipped when another node holds it: that node does it). It returns
// what it attached and what it could not.
func (d *db) reattachOrphans(ctx context.Context) (attached, left []string, err error) {
	_, err = d.maintTx(ctx, func(tx pgx.Tx) error {
		os, err := orphans(ctx, tx)
		if err != nil {
			return err
		}
		for _, o := range os {
			bounds, ok, err := detachedBounds(ctx, tx, o)
			if err != nil {
				return err
			}
			if !ok {
				left = append(left, o.name)
				d.log.Error().Str("table", o.name).Msg("a detached partition holds rows no pass froze, and its bounds are unknown: " +
					"left as it is (attach it again by hand)")
				continue
			}
			// A savepoint: one that overlaps a partition created since
			// stays, and the others are attached.
			if _, err := tx.Exec(ctx, `SAVEPOINT reattach`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE touba.%s ATTACH PARTITION touba.%s FOR VALUES %s`,
				o.t.rangeParent(), o.name, bounds)); err != nil {
				if _, rerr := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT reattach`); rerr != nil {
					return rerr
				}
				left = append(left, o.name)
				d.log.Error().Err(err).Str("table", o.name).Msg("a detached partition holds rows no pass froze: " +
					"attaching it again failed; left as it is")
				continue
			}
			attached = append(attached, o.name)
			d.log.Warn().Str("table", o.name).Str("bounds", bounds).Msg("attached again a partition detached without its freeze " +
				"(by an earlier build, whose pass had lost the maintenance lock): its entries are listed again")
		}
		return nil
	})
	return attached, left, err
}
