package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/internal/purgemarks"
	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/internal/uuidv7"
)

// The retention pass, bounded (schema 0015_purge_marks.sql). A pass read
// every done entry of the history in the writer to find the bodies that
// had become purgeable since the last one: 245 ms of the writer an hour at
// 1,000,000 entries (BenchmarkPurgePass), every delivery waiting
// meanwhile (issue 42). PostgreSQL's pass is bounded the same way
// (postgres/queue_purge.go); here there is no lease floor, so the marks
// come from samples.
//
// What a pass with cutoff C must purge that the last one (cutoff P) did
// not is a done entry that finished in [P, C) (or a merged one whose
// carrier did), plus what the last one left. Every markEvery the queue
// samples the lowest queue id of a pending, running or waiting entry (no
// higher than its clock less markMargin, for the ids taken at intake and
// not yet written) into the hour's mark, and a replay or a resume writes
// such a sample lowered to the entry it revives. An entry that ends was
// unfinished at the sample before (its id is at or above that mark),
// accepted since (its id is its acceptance time, above the sample's clock
// less markMargin), or revived since (the revival's mark): the lowest mark
// of the hours around [P, C) bounds the range from below. A queue id is
// the acceptance time, before the end: C plus markMargin bounds it from
// above. What a pass finds purgeable by age but keeps (a wait may still
// read it) and the merged entries below their carrier (whose end the marks
// follow) still holding bodies go to purge_left,
// which the next pass looks at by key. A pass reads every entry when it
// has no previous pass, when a mark it needs is missing (the daemon was
// stopped that hour), and once a day (purgemarks.FullEvery), for what the
// marks cannot see (a file written by the previous release meanwhile).

const (
	// markEvery is how often the queue samples its mark.
	markEvery = 10 * time.Minute
	// markMargin keeps a sample below its clock by the longest an id
	// taken at intake may wait before its entry is written.
	markMargin = time.Hour
)

// sampleSQL lowers the mark of hour ?1 to the lowest queue id of a
// pending, running or waiting entry, ?2 (the clock less markMargin) or ?3,
// whichever is lowest.
const sampleSQL = `INSERT INTO purge_marks (hour, floor)
	SELECT ?1, MIN(?2, ?3, COALESCE((SELECT MIN(queue_id) FROM entries WHERE status = 'pending'), ?2),
		COALESCE((SELECT MIN(queue_id) FROM entries WHERE status = 'running'), ?2),
		COALESCE((SELECT MIN(queue_id) FROM entries WHERE status = 'waiting'), ?2))
	ON CONFLICT (hour) DO UPDATE SET floor = MIN(floor, excluded.floor)`

// sampleMark records the lowest unfinished queue id in the hour's mark.
func (q *Queue) sampleMark(ctx context.Context) error {
	return q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		return 0, lowerMark(ctx, tx, q.opts.Now(), "")
	})
}

// lowerMark samples the hour's mark, lowered to id too (an entry revived
// in tx; "" for none): a sample, not the id alone, so that an hour whose
// only mark a revival wrote (no sample ran: --retention 0, the daemon
// stopped) still bounds every entry unfinished then.
func lowerMark(ctx context.Context, tx sqlitex.Execer, now time.Time, id string) error {
	ceiling := uuidv7.Floor(now.Add(-markMargin).UnixMilli())
	if id == "" {
		id = ceiling
	}
	if _, err := tx.ExecContext(ctx, sampleSQL, purgemarks.Hour(now), ceiling, id); err != nil {
		return fmt.Errorf("purge mark: %w", err)
	}
	return nil
}

// CrashPurgeBeforeRecord is the crash point of a retention pass whose
// chunks are committed and which is not recorded yet, for tests that kill
// the daemon there.
const CrashPurgeBeforeRecord = "retention.sqlite.before_record"

// purgeRange is what one pass reads: every entry (full), or the queue ids
// in [lo, hi) and purge_left.
type purgeRange struct {
	full   bool
	lo, hi string
}

// purgePass purges the bodies of entries done before cutoff, reading only
// the range the marks allow, and records the pass.
func (q *Queue) purgePass(ctx context.Context, cutoff time.Time) (int64, error) {
	now := q.opts.Now()
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
	n, err := q.purgeChunks(ctx, `e.queue_id >= ?4 AND e.queue_id < ?5 AND `, before, r.lo, r.hi)
	if err != nil {
		return n, err
	}
	// What the last pass left, by key: most passes have nothing there, and
	// each chunk is an operation of the writer.
	var left bool
	if err := q.db.Read.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM purge_left)`).Scan(&left); err != nil {
		return n, fmt.Errorf("purge bodies: %w", err)
	}
	if left {
		m, err := q.purgeChunks(ctx, `e.queue_id IN (SELECT queue_id FROM purge_left) AND `, before)
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
	err := q.db.Read.QueryRowContext(ctx, `SELECT cutoff, full_at FROM purge_state`).Scan(&last, &fullAt)
	if errors.Is(err, sql.ErrNoRows) {
		return purgeRange{full: true}, nil
	} else if err != nil {
		return purgeRange{}, fmt.Errorf("purge state: %w", err)
	}
	prev, err1 := touba.ParseTime(last)
	at, err2 := touba.ParseTime(fullAt)
	if err1 != nil || err2 != nil || now.Sub(at) >= purgemarks.FullEvery {
		return purgeRange{full: true}, nil
	}
	// The sample before an end is at most markEvery older, possibly in the
	// hour before.
	from, to, want := purgemarks.Window(prev, cutoff, now, time.Hour)
	var have int64
	var lo sql.NullString
	if err := q.db.Read.QueryRowContext(ctx, `SELECT COUNT(*), MIN(floor) FROM purge_marks WHERE hour >= ? AND hour <= ?`,
		from, to).Scan(&have, &lo); err != nil {
		return purgeRange{}, fmt.Errorf("purge marks: %w", err)
	}
	if have < want || !lo.Valid {
		return purgeRange{full: true}, nil
	}
	return purgeRange{lo: lo.String, hi: uuidv7.Floor(cutoff.Add(markMargin).UnixMilli())}, nil
}

// endPurgePass records a pass that ended: its cutoff (its own, even below
// the one recorded: a lower cutoff only widens the next window), what it
// left (purge_left: what it read and found purgeable by age but kept, the
// merged entries below their carrier still holding bodies, and what the
// last pass left that still does), and, for a full pass, when.
func (q *Queue) endPurgePass(ctx context.Context, r purgeRange, before string, now time.Time) error {
	inRange, leftArgs := "", []any{before}
	if !r.full {
		inRange, leftArgs = ` AND e.queue_id >= ?2 AND e.queue_id < ?3`, []any{before, r.lo, r.hi}
	}
	stmts := []struct {
		sql  string
		args []any
	}{
		{`DELETE FROM purge_left WHERE NOT EXISTS (SELECT 1 FROM entries e WHERE e.queue_id = purge_left.queue_id AND e.body IS NOT NULL)`, nil},
		{`INSERT OR IGNORE INTO purge_left (queue_id) SELECT e.queue_id FROM entries e WHERE e.body IS NOT NULL
			AND (e.status = 'done' AND e.updated_at < ?1 OR e.status = 'merged' AND (e.queue_id < e.merged_into
				OR EXISTS (SELECT 1 FROM entries c WHERE c.queue_id = e.merged_into AND c.status = 'done' AND c.updated_at < ?1)))` + inRange, leftArgs},
		{`INSERT INTO purge_state (one, cutoff, full_at) VALUES (1, ?1, CASE WHEN ?3 THEN ?2 ELSE '' END)
			ON CONFLICT (one) DO UPDATE SET cutoff = excluded.cutoff,
				full_at = CASE WHEN ?3 THEN MAX(full_at, ?2) ELSE full_at END`, []any{before, touba.FormatTime(now), r.full}},
		{`DELETE FROM purge_marks WHERE hour < ?`, []any{purgemarks.Hour(now.Add(-purgemarks.Kept))}},
	}
	return q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		for _, st := range stmts {
			if _, err := tx.ExecContext(ctx, st.sql, st.args...); err != nil {
				return 0, fmt.Errorf("record the purge pass: %w", err)
			}
		}
		return 0, nil
	})
}
