package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
)

// Resume puts a done, failed, parked or cancelled entry back to pending
// from a step (touba.WaitStore, `queue resume`): the waits of r.Steps are
// removed and the offers they consumed released, its error and any cancel
// request cleared, and with NewEffects each step of r.Steps gets the next
// effect generation, in one transaction.
func (q *Queue) Resume(ctx context.Context, r touba.ResumeRequest) (touba.ResumeResult, error) {
	var res touba.ResumeResult
	err := q.change(r.QueueID, func(ctx context.Context, tx *Tx) error {
		res = touba.ResumeResult{QueueID: r.QueueID, To: touba.StatusPending}
		var cancel bool
		err := tx.QueryRow(ctx, `SELECT status, cancel_requested IS NOT NULL FROM touba.entries WHERE queue_id = $1 FOR UPDATE`,
			r.QueueID).Scan(&res.From, &cancel)
		if errors.Is(err, pgx.ErrNoRows) {
			return touba.Errorf(touba.EEntryNotResumable, "no entry %s", r.QueueID)
		} else if err != nil {
			return err
		}
		if !touba.Resumable(res.From) {
			return touba.Errorf(touba.EEntryNotResumable, "entry %s is %s; only done, failed, parked and cancelled entries are resumed",
				r.QueueID, res.From)
		}
		if res.From == touba.StatusParked && cancel && !r.IgnoreCancel {
			res.To = touba.StatusCancelled
			return q.cancelParked(ctx, tx, r.QueueID)
		}
		steps := r.Steps
		if steps == nil {
			steps = []string{}
		}
		// The values of the offers it releases are locked first, in
		// sorted order, as BeginWait and intake lock them: a wait begun
		// meanwhile on another node sees them released.
		rows, err := tx.Query(ctx, `SELECT DISTINCT key, value FROM touba.waits WHERE queue_id = $1
			AND (step_id = ANY($2) OR state IN ('open', 'cancelled', 'timed_out')) AND matched_queue_id IS NOT NULL ORDER BY key, value`,
			r.QueueID, steps)
		if err != nil {
			return err
		}
		var locks [][2]string
		for rows.Next() {
			var kv [2]string
			if err := rows.Scan(&kv[0], &kv[1]); err != nil {
				rows.Close()
				return err
			}
			locks = append(locks, kv)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, kv := range locks {
			if _, err := tx.Exec(ctx, lockValue, kv[0], kv[1]); err != nil {
				return fmt.Errorf("lock wait value: %w", err)
			}
		}
		// The offers the removed waits consumed are free again, for the
		// steps' next run (or another wait) to consume. A wait that ended
		// cancelled never completed its step, whichever step the resume is
		// from: the run reaches it again and waits anew.
		if _, err := tx.Exec(ctx, `WITH d AS (DELETE FROM touba.waits WHERE queue_id = $1
				AND (step_id = ANY($2) OR state IN ('open', 'cancelled', 'timed_out')) RETURNING key, matched_queue_id)
			UPDATE touba.offers o SET consumed_by = NULL FROM d
			WHERE o.queue_id = d.matched_queue_id AND o.key = d.key AND o.consumed_by = $1`, r.QueueID, steps); err != nil {
			return fmt.Errorf("remove waits: %w", err)
		}
		var raw []byte
		if err := tx.QueryRow(ctx, `UPDATE touba.entries SET status = 'pending', attempts = 0, error_code = NULL,
				error_message = NULL, cancel_requested = NULL, not_before = NULL, wake_at = NULL, updated_at = $3,
				program_digest = COALESCE(NULLIF($5, ''), program_digest),
				effect_gens = CASE WHEN $4 THEN COALESCE(effect_gens, '{}'::jsonb) || COALESCE((SELECT jsonb_object_agg(s,
					COALESCE((effect_gens ->> s)::int, 0) + 1) FROM unnest($2::text[]) s), '{}'::jsonb) ELSE effect_gens END
			WHERE queue_id = $1 RETURNING effect_gens`, r.QueueID, steps, q.db.now(), r.NewEffects, r.Repin).Scan(&raw); err != nil {
			return err
		}
		if err := lowerFloor(ctx, tx, q.db.cfg.Now(), r.QueueID); err != nil {
			return err
		}
		gens, err := decodeGens(raw)
		if err != nil {
			return fmt.Errorf("effect generations: %w", err)
		}
		res.Gens = make(map[string]int, len(steps))
		for _, s := range steps {
			res.Gens[s] = gens[s]
		}
		// Back in its key's active set: held again if the key is full.
		return reholdKey(ctx, tx, r.QueueID)
	})
	if err != nil {
		return touba.ResumeResult{}, fmt.Errorf("resume %s: %w", r.QueueID, err)
	}
	return res, nil
}
