package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// Resume from a step (SPEC §6 `queue resume`) and the effect generations
// it gives steps. The admin side checks the step and removes its
// checkpoints (RunStore.DropSteps) first; here the entry goes back to
// pending in one transaction with its waits and offers.

// Resume puts a done, failed, parked or cancelled entry back to pending:
// attempts 0, error and cancel request cleared, the waits of r.Steps
// removed and the offers they consumed released (and any wait that ended
// cancelled, as Replay does), and with NewEffects the next effect
// generation for each of r.Steps.
func (q *Queue) Resume(ctx context.Context, r touba.ResumeRequest) (touba.ResumeResult, error) {
	var out touba.ResumeResult
	err := q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		var err error
		out, err = q.resume(ctx, tx, r)
		if err != nil || out.To != touba.StatusPending {
			return 0, err
		}
		return 1, nil
	})
	if err != nil {
		return touba.ResumeResult{}, fmt.Errorf("resume %s: %w", r.QueueID, err)
	}
	return out, nil
}

func (q *Queue) resume(ctx context.Context, tx *sqlitex.Tx, r touba.ResumeRequest) (touba.ResumeResult, error) {
	var st, ref string
	var key, gensText sql.NullString
	var max int
	var cancel bool
	err := tx.QueryRowContext(ctx, `SELECT status, trigger_ref, conc_key, conc_max, effect_gens, cancel_requested IS NOT NULL
		FROM entries WHERE queue_id = ?`, r.QueueID).Scan(&st, &ref, &key, &max, &gensText, &cancel)
	if errors.Is(err, sql.ErrNoRows) {
		return touba.ResumeResult{}, touba.Errorf(touba.EEntryNotResumable, "no entry %s", r.QueueID)
	} else if err != nil {
		return touba.ResumeResult{}, err
	}
	if !touba.Resumable(st) {
		return touba.ResumeResult{}, touba.Errorf(touba.EEntryNotResumable,
			"entry %s is %s; only done, failed, parked and cancelled entries are resumed", r.QueueID, st)
	}
	if st == touba.StatusParked && cancel && !r.IgnoreCancel {
		if err := q.cancelParked(ctx, tx, r.QueueID, ref, key, max); err != nil {
			return touba.ResumeResult{}, err
		}
		return touba.ResumeResult{QueueID: r.QueueID, From: st, To: touba.StatusCancelled}, nil
	}
	gens, err := decodeGens(gensText)
	if err != nil {
		return touba.ResumeResult{}, fmt.Errorf("entry %s: %w", r.QueueID, err)
	}
	for _, step := range r.Steps {
		// The offers the step's wait consumed go back to the line: the
		// resumed run's wait consumes the earliest again.
		if _, err := tx.ExecContext(ctx, `UPDATE offers SET consumed_by = NULL WHERE consumed_by = ?1
			AND key = (SELECT key FROM waits WHERE queue_id = ?1 AND step_id = ?2 AND kind = 'event')`, r.QueueID, step); err != nil {
			return touba.ResumeResult{}, err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM waits WHERE queue_id = ? AND step_id = ?`, r.QueueID, step); err != nil {
			return touba.ResumeResult{}, err
		}
		if r.NewEffects {
			gens[step]++
		}
	}
	// A wait that ended cancelled never completed its step, whichever step
	// the resume is from: the run reaches it again and must wait anew.
	if _, err := tx.ExecContext(ctx, `DELETE FROM waits WHERE queue_id = ? AND state IN ('open', 'cancelled', 'timed_out')`, r.QueueID); err != nil {
		return touba.ResumeResult{}, err
	}
	var gensArg any
	if len(gens) > 0 {
		b, err := json.Marshal(gens)
		if err != nil {
			return touba.ResumeResult{}, err
		}
		gensArg = string(b)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE entries SET status = 'pending', attempts = 0, error_code = NULL, error_message = NULL,
		not_before = NULL, wake_at = NULL, cancel_requested = NULL, effect_gens = ?,
		program_digest = COALESCE(NULLIF(?, ''), program_digest), updated_at = ? WHERE queue_id = ?`,
		gensArg, r.Repin, q.now(), r.QueueID); err != nil {
		return touba.ResumeResult{}, err
	}
	// Ended again, it must be in a retention pass's range (purge.go).
	if err := lowerMark(ctx, tx, q.opts.Now(), r.QueueID); err != nil {
		return touba.ResumeResult{}, err
	}
	if key.Valid && max > 0 {
		// Back among its key's active entries, ahead of later ones (as
		// Replay does).
		if _, err := tx.ExecContext(ctx, rehold, ref, key.String, max); err != nil {
			return touba.ResumeResult{}, fmt.Errorf("re-hold key of %s: %w", r.QueueID, err)
		}
	}
	res := touba.ResumeResult{QueueID: r.QueueID, From: st, To: touba.StatusPending, Gens: map[string]int{}}
	for _, step := range r.Steps {
		res.Gens[step] = gens[step]
	}
	return res, nil
}

// EffectGens are the effect generations of an entry's steps.
func (q *Queue) EffectGens(ctx context.Context, queueID string) (map[string]int, error) {
	var text sql.NullString
	err := q.db.Read.QueryRowContext(ctx, `SELECT effect_gens FROM entries WHERE queue_id = ?`, queueID).Scan(&text)
	if errors.Is(err, sql.ErrNoRows) {
		return map[string]int{}, nil
	} else if err != nil {
		return nil, fmt.Errorf("effect generations of %s: %w", queueID, err)
	}
	gens, err := decodeGens(text)
	if err != nil {
		return nil, fmt.Errorf("effect generations of %s: %w", queueID, err)
	}
	return gens, nil
}

func decodeGens(s sql.NullString) (map[string]int, error) {
	gens := map[string]int{}
	if !s.Valid || s.String == "" {
		return gens, nil
	}
	if err := json.Unmarshal([]byte(s.String), &gens); err != nil {
		return nil, fmt.Errorf("effect_gens: %w", err)
	}
	return gens, nil
}
