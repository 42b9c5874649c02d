package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// purgeChunk bounds one retention transaction, so that a large backlog of
// old bodies never holds the writer (and every waiting 202) for long.
const purgeChunk = 500

// PurgeBodies drops the bodies of done entries that finished before cutoff,
// and of merged entries whose carrier did (its run read them), and returns
// how many it dropped. The rows stay: their identity
// (trigger_ref, event_id) and digest keep answering redeliveries with
// TriggerReplayRejected or TriggerEventPayloadConflict. Only done entries are
// touched: pending, running, failed and parked entries can still run (an
// operator may replay failed and parked ones), so their bodies are kept.
//
// The durable steps' rows of a purged entry go with its body: its waits,
// the offers it made or consumed and its cancel keys (a done entry is
// never cancelled, and a wait given its offer now would find no body).
// A body a wait may still read is kept, by the rule --history keeps an
// entry by (unreadClause): one matched by the wait of an unfinished entry,
// or holding an unconsumed offer for a trigger with unfinished entries
// (SPEC §2.3, issue 42).
//
// The work goes through the writer in chunks, each one state change among
// the enqueues of its batch.
func (q *Queue) PurgeBodies(ctx context.Context, cutoff time.Time) (int64, error) {
	return q.purgeChunks(ctx, "", touba.FormatTime(cutoff))
}

// purgeChunks purges, a chunk a change, the bodies PurgeBodies describes
// among the entries e for which where holds ("" for every entry, else a
// condition ending in AND, its parameters from ?4: args).
func (q *Queue) purgeChunks(ctx context.Context, where, before string, args ...any) (int64, error) {
	// A condition by key (purge_left) must be what the plan searches by:
	// on the status terms, SQLite would search entries_ready for every
	// done entry (a multi-index OR) and test the key on each.
	status := "status"
	if strings.Contains(where, " IN (") {
		status = "+status"
	}
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		var n int64
		err := q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
			awaiting, err := unfinishedTriggers(ctx, tx)
			if err != nil {
				return 0, fmt.Errorf("purge bodies: %w", err)
			}
			rows, err := tx.QueryContext(ctx, `UPDATE entries SET body = NULL, headers = '{}'
				WHERE queue_id IN (SELECT queue_id FROM entries e
					WHERE `+where+`(`+status+` = 'done' OR `+status+` = 'merged' AND EXISTS (SELECT 1 FROM entries c
					    WHERE c.queue_id = e.merged_into AND c.status = 'done' AND c.updated_at < ?1))
					  AND updated_at < ?1 AND body IS NOT NULL
					  AND `+named(unreadClause, "?3")+`
					LIMIT ?2)
				RETURNING queue_id`, append([]any{before, purgeChunk, awaiting}, args...)...)
			if err != nil {
				return 0, fmt.Errorf("purge bodies: %w", err)
			}
			ids, err := scanIDs(rows)
			rows.Close()
			if err != nil {
				return 0, fmt.Errorf("purge bodies: %w", err)
			}
			n = int64(len(ids))
			if n == 0 {
				return 0, nil
			}
			return 0, pruneMatches(ctx, tx, ids)
		})
		if err != nil {
			return total, err
		}
		total += n
		if n < purgeChunk {
			return total, nil
		}
	}
}

// RetentionEvery is how often RunRetention looks for bodies to purge under
// a given retention: a quarter of it, between one second and one hour, so a
// body outlives its retention by at most that much.
func RetentionEvery(retention time.Duration) time.Duration {
	every := retention / 4
	switch {
	case every < time.Second:
		every = time.Second
	case every > time.Hour:
		every = time.Hour
	}
	return every
}

// RunRetention purges, at once and then every RetentionEvery(retention)
// until ctx ends, the bodies of done entries that finished more than
// retention ago, each pass reading the entries that can hold what became
// purgeable since the last (purgePass); between passes it samples the
// marks those ranges come from (markEvery). report sees each pass that
// purged something or failed, and a sample that failed.
func (q *Queue) RunRetention(ctx context.Context, retention time.Duration, report func(purged int64, err error)) {
	if retention <= 0 {
		return
	}
	every := RetentionEvery(retention)
	t := time.NewTicker(min(every, markEvery))
	defer t.Stop()
	due := time.Now()
	for {
		err := q.sampleMark(ctx)
		if err != nil && ctx.Err() == nil && report != nil {
			report(0, fmt.Errorf("purge mark: %w", err))
		}
		if now := time.Now(); !now.Before(due) {
			n, err := q.purgePass(ctx, q.opts.Now().Add(-retention))
			if (n > 0 || err != nil) && ctx.Err() == nil && report != nil {
				report(n, err)
			}
			for !now.Before(due) {
				due = due.Add(every)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// unfinishedTriggers lists, as a JSON array, the triggers with an entry
// not finished (pending, running, waiting or parked): an entry of one may
// still reach a wait_for and take an offer made for it (SPEC §2.3), so a
// done entry whose offer to such a trigger is unconsumed keeps its body
// and its offer whatever --retention says (unreadClause's ?awaited).
func unfinishedTriggers(ctx context.Context, tx *sqlitex.Tx) (string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT DISTINCT trigger_ref FROM entries WHERE status IN `+unfinishedList)
	if err != nil {
		return "", err
	}
	refs, err := scanIDs(rows)
	rows.Close()
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(append([]string{}, refs...))
	return string(b), err
}

// pruneMatches deletes the waits, offers and cancel keys of the entries
// ids (a purge chunk), through their indexes.
func pruneMatches(ctx context.Context, tx *sqlitex.Tx, ids []string) error {
	list, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	for _, stmt := range []string{
		`DELETE FROM waits WHERE queue_id IN (SELECT value FROM json_each(?1))`,
		`DELETE FROM offers WHERE queue_id IN (SELECT value FROM json_each(?1))`,
		`DELETE FROM offers WHERE consumed_by IN (SELECT value FROM json_each(?1))`,
		`DELETE FROM cancel_keys WHERE queue_id IN (SELECT value FROM json_each(?1))`,
	} {
		if _, err := tx.ExecContext(ctx, stmt, string(list)); err != nil {
			return fmt.Errorf("prune waits and offers: %w", err)
		}
	}
	return nil
}
