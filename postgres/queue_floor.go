package postgres

import (
	"context"
	"errors"
	"fmt"
	"github.com/touba/touba-trigger/internal/purgemarks"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The lease's floor (migration 0022_pick_floor.sql). A lease's picks name
// the parent entries with nothing the planner can prune by, so each one
// read entries_ready_trigger (or entries_ready, entries_leases) in every
// time partition, and its generic plan locked every partition, however
// little the old ones hold: a lease cost more the longer the history
// (issue 42). The floor is a queue id at or below that of every entry
// that a pick can take or that can become one a pick takes without a new
// queue id: pending, running and waiting. The picks
// then say queue_id >= the floor's partition's lower bound as a constant
// of their text, and the planner leaves the partitions wholly below it out
// of the plan (not locked, not read). entries_kept, which a pass moves the
// unfinished entries of a forgotten range to, is a LIST leaf the bound does
// not prune, but whose rows it filters like any other: the floor covers
// its entries too (a trigger paused past the window keeps it down).
//
// Why the floor is never above such an entry:
//   - raiseFloor, the only thing that raises it, locks the floor's row,
//     then reads the entries in a statement of its own (read committed: a
//     snapshot taken after the lock), and never sets it above its node's
//     clock or the database's, less floorMargin, so an entry being
//     inserted meanwhile by a node whose clock is within floorMargin of
//     those (a queue id is its node's time) is not passed, and a node whose
//     clock runs ahead cannot raise it past the others' entries.
//   - A finished entry made pending again (replay, resume) lowers the
//     floor in its own transaction, after its own update, with a statement
//     that always locks the row (lowerFloor): a raise that read the
//     entries before that commit waits for the row and writes first, and
//     the lowering is evaluated on the raised row.
//   - Every other change that makes an entry pickable starts from pending,
//     running or waiting, which the floor already covers; a new entry's
//     queue id is its node's time.
//
// A node whose clock is behind the database's and the raising node's by
// more than floorMargin, or a node of the previous release replaying below
// the floor, makes an entry the picks cannot see until the next raise
// (floorEvery, on every node), which reads it and lowers the floor: a
// delay, never a loss. A lease reads the floor in its own transaction; an
// entry revived after that read is leased by the next lease. The row gone
// (deleted by hand) reads as NULL, unbounded; the next raise puts it back,
// NULL, and the one after computes it.

// floorMargin is how far below its node's clock a raise keeps the floor,
// for the entries being inserted meanwhile (their ids are their nodes'
// times).
const floorMargin = time.Hour

// floorEvery is how often each node raises the floor.
const floorEvery = 10 * time.Second

// readFloor is the floor as a lease reads it (NULL: not yet computed).
const readFloor = `SELECT (SELECT floor FROM touba.pick_floor)`

// raiseFloor computes the floor again from the entries of the time
// partitions; a schema not partitioned has none to leave out, and keeps
// NULL.
func (q *Queue) raiseFloor(ctx context.Context) error {
	tx, err := q.db.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	var live bool
	var dbMS int64
	var was *string
	now := q.db.cfg.Now()
	err = tx.QueryRow(ctx, `SELECT to_regclass('touba.entries_live') IS NOT NULL, (extract(epoch FROM now()) * 1000)::bigint, floor
		FROM touba.pick_floor FOR UPDATE`).Scan(&live, &dbMS, &was)
	if errors.Is(err, pgx.ErrNoRows) {
		// Deleted by hand: back, NULL, computed at the next raise.
		if _, err := tx.Exec(ctx, `INSERT INTO touba.pick_floor (one, floor) VALUES (true, NULL) ON CONFLICT DO NOTHING`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, markOfSQL("''"), purgemarks.Hour(now)); err != nil {
			return err
		}
		return tx.Commit(ctx)
	} else if err != nil {
		return err
	}
	if !live {
		return nil
	}
	// The earlier of the two clocks (the database's as the tests shift it).
	clock := min(now.UnixMilli(), dbMS+q.db.clockShift(0).Milliseconds())
	var floor string
	if err := tx.QueryRow(ctx, floorOfEntries, idAt(clock-floorMargin.Milliseconds())).Scan(&floor); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE touba.pick_floor SET floor = $1`, floor); err != nil {
		return err
	}
	// The hour's mark (queue_purge.go): the lower of the floor that held
	// until now (NULL: unbounded, '') and the one that holds from now, by
	// the column's collation.
	if _, err := tx.Exec(ctx, markOfSQL(`LEAST(COALESCE($2::text, ''), $3)`), purgemarks.Hour(now), was, floor); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// floorOfEntries is the smallest queue id of a pickable entry, or $1 (the
// earlier clock less floorMargin) when that is lower: one probe of
// entries_ready (status, held, queue_id) per status, held and table (the
// planner's min/max path over a merge of the partitions' index scans).
// entries_kept is read too: the bound prunes only the time partitions,
// but as a condition it passes over every row below it, and an entry a
// pass moved there (a trigger paused past the window, a wait longer than
// it) is unfinished with its old queue id.
var floorOfEntries = `SELECT LEAST(` + strings.Join(floorProbes(), ", ") + `, $1)`

func floorProbes() []string {
	var out []string
	for _, table := range []string{"entries_live", "entries_kept"} {
		for _, st := range []string{"pending", "running", "waiting"} {
			for _, held := range []string{"false", "true"} {
				out = append(out, `(SELECT queue_id FROM touba.`+table+` WHERE status = '`+st+`' AND held = `+held+
					` ORDER BY queue_id LIMIT 1)`)
			}
		}
	}
	return out
}

// lowerFloor lowers the floor to the lowest of queueIDs, entries made
// pending again in tx (none: nothing to do); it takes the floor's row lock
// even when the floor is lower already (see above: a raise in flight must
// wait for tx).
func lowerFloor(ctx context.Context, tx *Tx, now time.Time, queueIDs ...string) error {
	if len(queueIDs) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, lowerFloorSQL, queueIDs, purgemarks.Hour(now))
	if err != nil {
		return fmt.Errorf("lower the lease floor: %w", err)
	}
	return nil
}

// lowerFloorSQL is lowerFloor's statement ($1 the ids, $2 the hour whose
// purge mark the lowered floor lowers too: queue_purge.go); the lowest by
// the column's collation, as the floor and the partition bounds compare.
const lowerFloorSQL = `WITH f AS (UPDATE touba.pick_floor SET floor = CASE WHEN floor IS NULL THEN NULL
	ELSE LEAST(floor, (SELECT min(x) FROM unnest($1::text[]) x)) END RETURNING floor)
	INSERT INTO touba.purge_marks (hour, floor) SELECT $2, COALESCE(floor, '') FROM f
	ON CONFLICT (hour) DO UPDATE SET floor = LEAST(touba.purge_marks.floor, EXCLUDED.floor)`

// boundNow is the floor's bound read now, for a read of pickable or
// waiting entries outside a lease (the next wake, the ready triggers), so
// that its plan leaves the old partitions out as the lease's does; "" when
// the floor cannot be read (unbounded, as before).
func (q *Queue) boundNow(ctx context.Context) string {
	var floor *string
	if err := q.db.pool.QueryRow(ctx, readFloor).Scan(&floor); err != nil {
		return ""
	}
	return q.db.hot.floorBound(floor)
}

// floorBound is the lower bound the picks name for floor ("" for none: a
// NULL floor, or one below every partition this node knows of). It is the
// lower bound of the partition floor falls in, or the upper bound of the
// one before when it falls between two (no entry is there), so that the
// picks' texts (each a statement of its own) change only when the floor
// crosses a partition.
func (h *hotLeaves) floorBound(floor *string) string {
	if h == nil || floor == nil {
		return ""
	}
	ms, ok := msOf(*floor)
	if !ok {
		return ""
	}
	h.mu.RLock()
	list := h.list
	h.mu.RUnlock()
	i := sort.Search(len(list), func(i int) bool { return list[i].to > ms })
	switch {
	case i < len(list) && list[i].from <= ms:
		return boundText(list[i].from)
	case i > 0:
		return boundText(list[i-1].to)
	}
	return ""
}

// bounded is pick with every read of entries bounded below by bound (pick
// itself for ""). bound is idAt's text: hex digits and dashes only.
func bounded(pick, bound string) string {
	if bound == "" {
		return pick
	}
	pick = strings.ReplaceAll(pick, "FROM touba.entries e WHERE ", "FROM touba.entries e WHERE e.queue_id >= '"+bound+"' AND ")
	return strings.ReplaceAll(pick, "FROM touba.entries WHERE ", "FROM touba.entries WHERE queue_id >= '"+bound+"' AND ")
}
