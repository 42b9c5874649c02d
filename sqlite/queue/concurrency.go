package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// Per-key concurrency (SPEC §2.1 `concurrency`), kept in the queue file so
// that it holds across retries, restarts and crashes; see
// schema/0002_concurrency.sql for the model. In short: a pending entry is
// held while it is not among the first conc_max active (pending, running,
// waiting or parked) entries of its key in acceptance order, and Lease
// takes only entries that are not held. A waiting entry (a sleep, a wait
// for an event) is in progress like a running one: it keeps its place, and
// only done, failed and cancelled release the key (schema/0006_waits.sql
// rebuilt entries_key with 'waiting').

// keyActive selects an entry that counts against its key's conc_max. Its
// status test is written exactly as entries_key's predicate (migration
// 0014: ORs, not IN), so that SQLite reads that index.
const keyActive = `conc_key IS NOT NULL AND (status = 'pending' OR status = 'running' OR status = 'parked' OR status = 'waiting')
	AND (status <> 'parked' OR error_code IS NOT 'ProgramChanged')`

// activeOfKey counts, up to a limit, the active entries of a key. It reads
// the entries_key index and stops at the limit, so a long line behind a
// key costs no more than a short one.
const activeOfKey = `SELECT COUNT(*) FROM (SELECT 1 FROM entries
	WHERE trigger_ref = ? AND conc_key = ? AND ` + keyActive + `
	LIMIT ?)`

// releaseNext un-holds the first conc_max active entries of a key: after
// an entry of the key left the active set, the next in line may start.
const releaseNext = `UPDATE entries SET held = 0 WHERE held = 1 AND hold_on IS NULL AND queue_id IN (
	SELECT queue_id FROM entries
	WHERE trigger_ref = ? AND conc_key = ? AND ` + keyActive + `
	ORDER BY queue_id LIMIT ?)`

// rehold recomputes held for every pending entry of a key: after a failed
// entry came back (replay) ahead of later ones, those later ones wait
// behind it again. While max entries of the key run (later ones, started
// when the replayed one had failed, a run handed back on its binding
// counting as one), every pending one waits: the next
// release lets the first in line go.
const rehold = `UPDATE entries SET held = CASE WHEN queue_id IN (
		SELECT queue_id FROM entries
		WHERE trigger_ref = ?1 AND conc_key = ?2 AND ` + keyActive + `
		ORDER BY queue_id LIMIT ?3)
	  AND (SELECT COUNT(*) FROM entries
		WHERE trigger_ref = ?1 AND conc_key = ?2 AND ` + keyActive + `
		  AND (status IN ('running', 'waiting') OR hold_on IS NOT NULL)) < ?3
	THEN 0 ELSE 1 END
	WHERE trigger_ref = ?1 AND conc_key = ?2 AND ` + keyActive + `
	  AND status = 'pending' AND hold_on IS NULL`

// keyOf reads the key of an entry; ok is false for an unkeyed one.
func keyOf(ctx context.Context, tx *sql.Tx, queueID string) (ref, key string, max int, ok bool, err error) {
	var k sql.NullString
	err = tx.QueryRowContext(ctx, `SELECT trigger_ref, conc_key, conc_max FROM entries WHERE queue_id = ?`, queueID).
		Scan(&ref, &k, &max)
	if err != nil {
		return "", "", 0, false, err
	}
	return ref, k.String, max, k.Valid && max > 0, nil
}

// reholdKey recomputes the held entries of queueID's key.
func reholdKey(ctx context.Context, tx *sql.Tx, queueID string) error {
	ref, key, max, ok, err := keyOf(ctx, tx, queueID)
	if err != nil || !ok {
		return err
	}
	if _, err := tx.ExecContext(ctx, rehold, ref, key, max); err != nil {
		return fmt.Errorf("re-hold key of %s: %w", queueID, err)
	}
	return nil
}

// heldAtEnqueue tells whether a new entry of key must wait: its key already
// has max active entries (earlier entries of the same batch included).
func heldAtEnqueue(ctx context.Context, tx *sqlitex.Tx, ref, key string, max int) (bool, error) {
	var n int
	if err := tx.QueryRowContext(ctx, activeOfKey, ref, key, max).Scan(&n); err != nil {
		return false, fmt.Errorf("count active entries of key: %w", err)
	}
	return n >= max, nil
}

// finishAndRelease is Finish's state change (args are qFinish's): the
// entry ends, and when it ends done, failed or cancelled (no longer
// active), the next of its key are let go, in the same transaction. An
// unkeyed entry ends with qFinishUnkeyed alone; a keyed one (or one not
// held) matches none of it, and qFinish returns its key. Failed takes
// qFail*, which refuse an entry asked to cancel: that one ends cancelled
// (cancelIfRequested). No savepoint: the guarded update writes nothing when
// it refuses, and an error after it (the key's release, a cancel) fails
// the batch.
func (q *Queue) finishAndRelease(queueID string, token int64, status string, args ...any) error {
	unkeyed, keyed := qFinishUnkeyed, qFinish
	if status == "failed" {
		unkeyed, keyed = qFailUnkeyed, qFail
	}
	return q.guarded(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		res, err := tx.ExecContext(ctx, unkeyed, args...)
		if err != nil {
			return 0, fmt.Errorf("entry %s: %w", queueID, err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return 0, nil
		}
		var ref string
		var key sql.NullString
		var max int
		err = tx.QueryRowContext(ctx, keyed, args...).Scan(&ref, &key, &max)
		if errors.Is(err, sql.ErrNoRows) {
			if status == "failed" {
				if done, err := q.cancelIfRequested(ctx, tx, queueID, token); done || err != nil {
					return 0, err
				}
			}
			return 0, whyNot(ctx, tx, queueID, token)
		} else if err != nil {
			return 0, fmt.Errorf("entry %s: %w", queueID, err)
		}
		if (status != "parked" || args[1] == touba.EProgramChanged) && key.Valid && max > 0 {
			if _, err := tx.ExecContext(ctx, releaseNext, ref, key.String, max); err != nil {
				return 0, fmt.Errorf("release key of %s: %w", queueID, err)
			}
		}
		return 0, nil
	})
}

// HeldKeys counts the keys that hold back at least one entry, for metrics
// and the console.
func (q *Queue) HeldKeys(ctx context.Context) (int64, error) {
	var n int64
	err := q.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT DISTINCT trigger_ref, conc_key FROM entries
		WHERE `+keyActive+` AND status = 'pending' AND held = 1 AND hold_on IS NULL)`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("held keys: %w", err)
	}
	return n, nil
}
