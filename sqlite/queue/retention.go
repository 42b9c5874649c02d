package queue

import (
	"context"
	"fmt"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// purgeChunk bounds one retention transaction, so that a large backlog of
// old bodies never holds the writer (and every waiting 202) for long.
const purgeChunk = 500

// PurgeBodies drops the bodies of done entries that finished before cutoff
// and returns how many it dropped. The rows stay: their identity
// (trigger_ref, event_id) and digest keep answering redeliveries with
// TriggerReplayRejected or TriggerEventPayloadConflict. Only done entries are
// touched: pending, running, failed and parked entries can still run (an
// operator may replay failed and parked ones), so their bodies are kept.
//
// The work goes through the writer in chunks, each one state change among
// the enqueues of its batch.
func (q *Queue) PurgeBodies(ctx context.Context, cutoff time.Time) (int64, error) {
	before := touba.FormatTime(cutoff)
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		var n int64
		err := q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
			res, err := tx.ExecContext(ctx, `UPDATE entries SET body = NULL, headers = '{}'
				WHERE queue_id IN (SELECT queue_id FROM entries
					WHERE status = 'done' AND updated_at < ? AND body IS NOT NULL LIMIT ?)`, before, purgeChunk)
			if err != nil {
				return 0, fmt.Errorf("purge bodies: %w", err)
			}
			n, _ = res.RowsAffected()
			return 0, nil
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
// retention ago. report sees each pass that purged something or failed.
func (q *Queue) RunRetention(ctx context.Context, retention time.Duration, report func(purged int64, err error)) {
	if retention <= 0 {
		return
	}
	t := time.NewTicker(RetentionEvery(retention))
	defer t.Stop()
	for {
		n, err := q.PurgeBodies(ctx, q.opts.Now().Add(-retention))
		if (n > 0 || err != nil) && ctx.Err() == nil && report != nil {
			report(n, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
