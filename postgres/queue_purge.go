package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/internal/purgemarks"
)

// The retention pass, bounded (migration 0023_purge_marks.sql). A pass
// looked at every done entry of the history (a scan of every partition of
// entries) to find the bodies that had become purgeable since the last
// one: with --history 90 days, --retention 7 days and the hourly pass,
// every entry was read about 2,000 times over its life, about 0.3 µs of the
// database's CPU each, whatever the volume (issue 42).
//
// What a pass with cutoff C must purge that the last one (cutoff P) did
// not is a done entry that finished in [P, C) (or a merged one whose
// carrier did), plus what the last one left. An entry that finishes at t
// was running just before, so its queue id is at or above the lease's
// floor at t (queue_floor.go: pending, running and waiting entries,
// entries_kept's included). Each raise and each revival records, in the
// hour's mark, the lowest floor of that hour; the lowest mark of the hours
// around [P, C) is the range's lower bound B. A queue id is its node's
// time, at or before the entry's end: its upper bound is C plus
// floorMargin (the clocks agree within it, as the floor assumes). A bounded
// pass reads the ids in [B, C + floorMargin): a few hours of arrivals when
// nothing old is unfinished.
//
// What a pass finds purgeable by age but keeps (a wait may still read the
// body: unread) or cannot lock, and the merged entries below their
// carrier (whose end the marks follow) still holding their bodies, go to
// purge_left, which the next pass looks at by key. A pass reads every
// entry, as before, when it has no previous pass to go from, when a mark
// it needs is missing (no node of this release ran that hour), and once
// a day (purgemarks.FullEvery) for what the marks cannot see: an
// entry revived and ended by a node of the previous release between two
// raises, or accepted by a node whose clock is off by more than
// floorMargin. A body so missed outlives --retention by up to a day.

// Crash points of a retention pass, for tests that kill or freeze the node
// in it.
const (
	CrashPurgeInChunk      = "retention.pg.in_chunk"      // a chunk's bodies cleared, its transaction open
	CrashPurgeBeforeRecord = "retention.pg.before_record" // every chunk committed, the pass not recorded
)

// markOfSQL lowers the mark of hour $1 to expr (of parameters from $2).
func markOfSQL(expr string) string {
	return `INSERT INTO touba.purge_marks (hour, floor) VALUES ($1, ` + expr + `)
	ON CONFLICT (hour) DO UPDATE SET floor = LEAST(touba.purge_marks.floor, EXCLUDED.floor)`
}

// purgeRange is what one pass reads: every entry (full), or the queue ids
// in [lo, hi) and purge_left.
type purgeRange struct {
	full   bool
	lo, hi string
}

// purgePass purges the bodies of entries done before cutoff, reading only
// the range the marks allow (above), and records the pass.
func (q *Queue) purgePass(ctx context.Context, cutoff time.Time) (int64, error) {
	now := q.db.cfg.Now()
	r, err := q.purgeRangeFor(ctx, cutoff, now)
	if err != nil {
		return 0, err
	}
	before := touba.FormatTime(cutoff)
	if r.full {
		n, err := q.PurgeBodies(ctx, cutoff)
		if err != nil {
			return n, err
		}
		crashpoint.Hit(CrashPurgeBeforeRecord)
		return n, q.endPurgePass(ctx, r, before, now)
	}
	n, err := q.purgeChunks(ctx, `e.queue_id >= $3 AND e.queue_id < $4`, before, r.lo, r.hi)
	if err != nil {
		return n, err
	}
	// What the last pass left, by key; most passes have nothing there,
	// and the statement's plan reads every partition (unread's subqueries).
	var left bool
	if err := q.db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM touba.purge_left)`).Scan(&left); err != nil {
		return n, fmt.Errorf("purge bodies: %w", err)
	}
	if left {
		m, err := q.purgeChunks(ctx, `e.queue_id IN (SELECT queue_id FROM touba.purge_left)`, before)
		n += m
		if err != nil {
			return n, err
		}
	}
	crashpoint.Hit(CrashPurgeBeforeRecord)
	return n, q.endPurgePass(ctx, r, before, now)
}

// purgeRangeFor is the range a pass with cutoff reads, from the last
// pass's cutoff and the marks of the hours around the two.
func (q *Queue) purgeRangeFor(ctx context.Context, cutoff, now time.Time) (purgeRange, error) {
	var last, fullAt string
	err := q.db.pool.QueryRow(ctx, `SELECT cutoff, full_at FROM touba.purge_state`).Scan(&last, &fullAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return purgeRange{full: true}, nil
	} else if err != nil {
		return purgeRange{}, fmt.Errorf("purge state: %w", err)
	}
	prev, err1 := touba.ParseTime(last)
	at, err2 := touba.ParseTime(fullAt)
	if err1 != nil || err2 != nil || now.Sub(at) >= purgemarks.FullEvery {
		return purgeRange{full: true}, nil
	}
	// The floor a raise recorded holds until the next raise, which may
	// fall in the next hour: two hours before the last cutoff.
	from, to, want := purgemarks.Window(prev, cutoff, now, 2*time.Hour)
	var have int64
	var lo *string
	if err := q.db.pool.QueryRow(ctx, `SELECT COUNT(*), MIN(floor) FROM touba.purge_marks WHERE hour >= $1 AND hour <= $2`,
		from, to).Scan(&have, &lo); err != nil {
		return purgeRange{}, fmt.Errorf("purge marks: %w", err)
	}
	if have < want || lo == nil {
		return purgeRange{full: true}, nil
	}
	return purgeRange{lo: *lo, hi: idAt(cutoff.Add(floorMargin).UnixMilli())}, nil
}

// endPurgePass records a pass that ended: its cutoff, what it left
// (purge_left: what it read and found purgeable by age but kept or
// locked, the merged entries below their carrier still holding bodies,
// and what the last pass left that still does), and, for a full pass,
// when.
func (q *Queue) endPurgePass(ctx context.Context, r purgeRange, before string, now time.Time) error {
	// A merged entry goes with its carrier's end, which the marks cover
	// at the carrier's id: one below it (or left by this pass) is looked
	// at again by key.
	left := `SELECT e.queue_id FROM touba.entries e WHERE e.body IS NOT NULL
		AND (e.status = 'done' AND e.updated_at < $1 OR e.status = 'merged' AND (e.queue_id < e.merged_into
			OR EXISTS (SELECT 1 FROM touba.entries c WHERE c.queue_id = e.merged_into AND c.status = 'done' AND c.updated_at < $1)))`
	args := []any{before, touba.FormatTime(now), r.full, purgemarks.Hour(now.Add(-purgemarks.Kept))}
	if !r.full {
		left += ` AND e.queue_id >= $5 AND e.queue_id < $6`
		args = append(args, r.lo, r.hi)
	}
	// A transaction of its own, not the writer's: batched with a replay
	// (which locks the floor's row) in another order on another node, it
	// could deadlock. One pass at a time records: the state row's lock
	// orders two nodes'. The pass's own cutoff, even below the one
	// recorded (a --retention lengthened, a node with a longer one): a
	// lower cutoff only widens the next window, a higher one kept would
	// leave ends out of it.
	err := pgx.BeginTxFunc(ctx, q.db.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO touba.purge_state (one, cutoff, full_at) VALUES (true, '', '') ON CONFLICT DO NOTHING`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM touba.purge_state FOR UPDATE`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `WITH l AS (`+left+`
				UNION SELECT p.queue_id FROM touba.purge_left p JOIN touba.entries e ON e.queue_id = p.queue_id
				WHERE e.body IS NOT NULL),
			gone AS (DELETE FROM touba.purge_left p WHERE NOT EXISTS (SELECT 1 FROM l WHERE l.queue_id = p.queue_id)),
			added AS (INSERT INTO touba.purge_left (queue_id) SELECT queue_id FROM l ON CONFLICT DO NOTHING),
			old AS (DELETE FROM touba.purge_marks WHERE hour < $4)
			UPDATE touba.purge_state SET cutoff = $1,
				full_at = CASE WHEN $3 THEN GREATEST(full_at, $2) ELSE full_at END`, args...)
		return err
	})
	if err != nil {
		return fmt.Errorf("record the purge pass: %w", err)
	}
	return nil
}
