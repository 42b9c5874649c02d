package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// --history on the queue file (SPEC §8.1). A pass (package sqlite) reads
// candidates from the reader pool, leaves out those whose effects are not
// settled (the journal's say), and deletes the rest here, through the
// writer, in small batches: each batch is one operation among intake's
// enqueues, never a long write transaction. The schedule cursors
// (tick.go) are never deleted: a schedule's newest tick outlives its
// entry (issue 42).

// finishedList is touba.FinishedStatuses as SQL, written exactly as the
// entries_finished index's predicate so that SQLite uses it.
const finishedList = `(status = 'done' OR status = 'cancelled' OR status = 'merged')`

// unfinishedList are the states of entries that may still reach a
// wait_for and take an offer (SPEC §2.3).
const unfinishedList = `('pending', 'running', 'waiting', 'parked')`

// Candidate is a finished entry a pass may forget, with its position in
// the entries_finished order (the pass's keyset cursor).
type Candidate struct {
	QueueID    string
	ReceivedAt string
}

// ForgetCandidates lists up to limit finished entries accepted before
// before, after the cursor (zero: from the oldest), oldest first.
func (q *Queue) ForgetCandidates(ctx context.Context, before time.Time, after Candidate, limit int) ([]Candidate, error) {
	rows, err := q.db.Read.QueryContext(ctx, `SELECT queue_id, received_at FROM entries
		WHERE `+finishedList+` AND received_at < ?1 AND (received_at, queue_id) > (?2, ?3)
		ORDER BY received_at, queue_id LIMIT ?4`, touba.FormatTime(before), after.ReceivedAt, after.QueueID, limit)
	if err != nil {
		return nil, fmt.Errorf("history candidates: %w", err)
	}
	defer rows.Close()
	var out []Candidate
	for rows.Next() {
		var c Candidate
		if err := rows.Scan(&c.QueueID, &c.ReceivedAt); err != nil {
			return nil, fmt.Errorf("history candidates: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// AwaitedTriggers lists, as a JSON array, the triggers with an unfinished
// entry: an offer made for a wait of one of them is kept (SPEC §2.3). It
// reads nothing of the entries when no offer is unconsumed.
func (q *Queue) AwaitedTriggers(ctx context.Context) (string, error) {
	var one int
	err := q.db.Read.QueryRowContext(ctx, `SELECT 1 FROM offers WHERE consumed_by IS NULL LIMIT 1`).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return "[]", nil
	} else if err != nil {
		return "", fmt.Errorf("awaited triggers: %w", err)
	}
	rows, err := q.db.Read.QueryContext(ctx, `SELECT DISTINCT trigger_ref FROM entries WHERE status IN `+unfinishedList)
	if err != nil {
		return "", fmt.Errorf("awaited triggers: %w", err)
	}
	refs, err := scanIDs(rows)
	rows.Close()
	if err != nil {
		return "", fmt.Errorf("awaited triggers: %w", err)
	}
	b, err := json.Marshal(append([]string{}, refs...))
	return string(b), err
}

// unreadClause leaves out, of the finished entries e, those a wait may
// still read: one holding an unconsumed offer for a trigger in ?awaited
// (a JSON array, AwaitedTriggers: an entry of one may still take it, SPEC
// §2.3), and one a wait of an unfinished entry matched (the wait's output
// is read from the entry when its entry runs again, issue 42). --history
// (keptClause) and --retention (PurgeBodies) both keep what it leaves out.
const unreadClause = `NOT EXISTS (SELECT 1 FROM offers o WHERE o.queue_id = e.queue_id AND o.consumed_by IS NULL
		AND substr(o.key, 1, instr(o.key, '#') - 1) IN (SELECT value FROM json_each(?awaited)))
	AND NOT EXISTS (SELECT 1 FROM waits w JOIN entries x ON x.queue_id = w.queue_id
		WHERE w.matched_queue_id = e.queue_id AND x.status NOT IN ('done', 'cancelled', 'merged'))`

// keptClause leaves out, of the finished entries e, those something still
// needs: one a wait may still read (unreadClause), and a merged delivery
// whose carrier has not finished (its run reads it in /events: a failed
// carrier replayed must see every delivery it gathered).
const keptClause = unreadClause + `
	AND NOT EXISTS (SELECT 1 FROM entries c WHERE c.queue_id = e.merged_into AND c.status NOT IN ('done', 'cancelled', 'merged'))`

// Forget deletes, of the entries ids, those still finished, accepted
// before before and not kept (keptClause, awaited as AwaitedTriggers
// gave it), with their identity, waits, offers and cancel keys, in one
// operation of the writer. It records them as forgotten (their runs and
// effects are still to be deleted, ForgetDone) and returns them.
func (q *Queue) Forget(ctx context.Context, ids []string, before time.Time, awaited string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	var gone []string
	err = q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		gone = nil
		rows, err := tx.QueryContext(ctx, `DELETE FROM entries AS e WHERE queue_id IN (SELECT value FROM json_each(?1))
			AND `+finishedList+` AND received_at < ?2 AND `+named(keptClause, "?3")+` RETURNING queue_id`,
			string(list), touba.FormatTime(before), awaited)
		if err != nil {
			return 0, fmt.Errorf("forget entries: %w", err)
		}
		gone, err = scanIDs(rows)
		rows.Close()
		if err != nil || len(gone) == 0 {
			return 0, err
		}
		done, err := json.Marshal(gone)
		if err != nil {
			return 0, err
		}
		if err := pruneMatches(ctx, tx, gone); err != nil {
			return 0, err
		}
		// A forgotten carrier's gathering, started or closed long ago.
		if _, err := tx.ExecContext(ctx, `DELETE FROM gatherings WHERE carrier IN (SELECT value FROM json_each(?1))`, string(done)); err != nil {
			return 0, fmt.Errorf("forget gatherings: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO forgotten (queue_id) SELECT value FROM json_each(?1)`, string(done)); err != nil {
			return 0, fmt.Errorf("forget entries: %w", err)
		}
		return 0, nil
	})
	return gone, err
}

// named puts arg in place of ?awaited in clause.
func named(clause, arg string) string { return strings.ReplaceAll(clause, "?awaited", arg) }

// Forgotten lists up to limit entries deleted by Forget whose runs and
// effects a pass has not deleted yet (a crash stopped it).
func (q *Queue) Forgotten(ctx context.Context, limit int) ([]string, error) {
	rows, err := q.db.Read.QueryContext(ctx, `SELECT queue_id FROM forgotten ORDER BY queue_id LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("forgotten entries: %w", err)
	}
	defer rows.Close()
	return scanIDs(rows)
}

// ForgetDone clears ids from the forgotten entries: their runs and
// effects are gone too.
func (q *Queue) ForgetDone(ctx context.Context, ids []string) error {
	list, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	return q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		_, err := tx.ExecContext(ctx, `DELETE FROM forgotten WHERE queue_id IN (SELECT value FROM json_each(?1))`, string(list))
		return 0, err
	})
}

// CountForgettable counts, up to max, the entries a pass at before would
// forget, ignoring the journal (an unsettled effect keeps a finished entry
// only in rare cases: a cancelled run's unknown effect).
func (q *Queue) CountForgettable(ctx context.Context, before time.Time, max int64) (int64, error) {
	awaited, err := q.AwaitedTriggers(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	err = q.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM entries AS e
		WHERE `+finishedList+` AND received_at < ?1 AND `+named(keptClause, "?2")+` LIMIT ?3)`,
		touba.FormatTime(before), awaited, max).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count forgettable: %w", err)
	}
	return n, nil
}

// OldestFinished is the acceptance of the oldest finished entry that no
// offer keeps (keptClause's first half), and entry that of the oldest
// entry of all; ok is false on an empty queue.
func (q *Queue) OldestFinished(ctx context.Context) (finished, entry time.Time, okFinished, okEntry bool, err error) {
	awaited, err := q.AwaitedTriggers(ctx)
	if err != nil {
		return
	}
	var f, e sql.NullString
	err = q.db.Read.QueryRowContext(ctx, `SELECT
		(SELECT received_at FROM entries AS e WHERE `+finishedList+` AND NOT EXISTS (SELECT 1 FROM offers o
			WHERE o.queue_id = e.queue_id AND o.consumed_by IS NULL
			AND substr(o.key, 1, instr(o.key, '#') - 1) IN (SELECT value FROM json_each(?1)))
		 ORDER BY received_at, queue_id LIMIT 1),
		(SELECT received_at FROM entries ORDER BY queue_id LIMIT 1)`, awaited).Scan(&f, &e)
	if err != nil {
		err = fmt.Errorf("oldest entries: %w", err)
		return
	}
	if f.Valid {
		finished, _ = touba.ParseTime(f.String)
		okFinished = true
	}
	if e.Valid {
		entry, _ = touba.ParseTime(e.String)
		okEntry = true
	}
	return
}

// Offers counts the unconsumed offers and returns when the oldest was
// made (ok false when none).
func (q *Queue) Offers(ctx context.Context) (n int64, oldest time.Time, ok bool, err error) {
	var first sql.NullString
	if err = q.db.Read.QueryRowContext(ctx, `SELECT COUNT(*), MIN(created_at) FROM offers WHERE consumed_by IS NULL`).Scan(&n, &first); err != nil {
		return 0, oldest, false, fmt.Errorf("offers: %w", err)
	}
	if first.Valid {
		oldest, _ = touba.ParseTime(first.String)
		ok = true
	}
	return n, oldest, ok, nil
}

// Size is the queue file's size on disk (with its WAL) and its free pages.
func (q *Queue) Size(ctx context.Context) (onDisk, free int64, err error) { return q.db.Size(ctx) }
