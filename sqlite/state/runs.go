package state

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// Run is one dispatcher run of a queue entry.
type Run = touba.Run

// StepOutput is a checkpointed step.
type StepOutput = touba.StepOutput

// RecordRun writes one finished run to the history. Run rows are history,
// not state the dispatcher depends on, so nobody waits for their fsync:
// they ride on the next commit of the file, and a crash may lose the
// newest (the entry's own state and checkpoints are what recovery uses).
// One statement, so no savepoint: its error, the transaction's, fails the
// batch.
func (s *State) RecordRun(r *Run) {
	ended := s.opts.Now()
	if s.w == nil {
		s.runErr(sqlitex.ErrReadOnly)
		return
	}
	s.w.GoShared(func(ctx context.Context, tx *sqlitex.Tx) error {
		_, err := tx.ExecContext(ctx, qInsertRun,
			r.RunID, r.QueueID, r.TriggerRef, r.Attempt, r.Status, r.ErrorCode, r.ErrorMessage,
			touba.FormatTime(r.StartedAt), touba.FormatTime(ended))
		return err
	}, s.runErr)
}

func (s *State) runErr(err error) {
	s.opts.Log.Error().Err(err).Msg("cannot record run history")
}

// SaveStep checkpoints a step's output; it is durable when SaveStep
// returns. A step is checkpointed once: a second save keeps the first.
// The lease token is not checked here: the state file cannot see the
// queue file's leases, and one process owns both (the journal lock).
// One statement (a second save is DO NOTHING, not an error), so no
// savepoint: its error, the transaction's, fails the batch.
func (s *State) SaveStep(queueID string, _ int64, stepID, runID string, output json.RawMessage) error {
	now := touba.FormatTime(s.opts.Now())
	if s.w == nil {
		return sqlitex.ErrReadOnly
	}
	return s.w.DoShared(context.Background(), func(ctx context.Context, tx *sqlitex.Tx) error {
		_, err := tx.ExecContext(ctx, qSaveStep, queueID, stepID, runID, string(output), now)
		return err
	})
}

const qSteps = `SELECT step_id, run_id, output, at FROM run_steps WHERE queue_id = ?`

// Steps returns the checkpointed outputs of an entry, by step id.
func (s *State) Steps(ctx context.Context, queueID string) (map[string]StepOutput, error) {
	rows, err := s.steps.QueryContext(ctx, queueID)
	if err != nil {
		return nil, fmt.Errorf("steps of %s: %w", queueID, err)
	}
	defer rows.Close()
	out := map[string]StepOutput{}
	for rows.Next() {
		var so StepOutput
		var out1, at string
		if err := rows.Scan(&so.StepID, &so.RunID, &out1, &at); err != nil {
			return nil, err
		}
		so.Output = json.RawMessage(out1)
		if so.At, err = touba.ParseTime(at); err != nil {
			return nil, err
		}
		out[so.StepID] = so
	}
	return out, rows.Err()
}

// Runs lists the runs of an entry, oldest first.
func (s *State) Runs(ctx context.Context, queueID string) ([]Run, error) {
	rows, err := s.db.Read.QueryContext(ctx, `SELECT run_id, queue_id, trigger_ref, attempt, status, COALESCE(error_code, ''),
		COALESCE(error_message, ''), started_at, ended_at FROM runs WHERE queue_id = ? ORDER BY started_at, run_id`, queueID)
	if err != nil {
		return nil, fmt.Errorf("runs of %s: %w", queueID, err)
	}
	defer rows.Close()
	var out []Run
	for rows.Next() {
		var r Run
		var started string
		var ended sql.NullString
		if err := rows.Scan(&r.RunID, &r.QueueID, &r.TriggerRef, &r.Attempt, &r.Status, &r.ErrorCode, &r.ErrorMessage,
			&started, &ended); err != nil {
			return nil, err
		}
		if r.StartedAt, err = touba.ParseTime(started); err != nil {
			return nil, err
		}
		if ended.Valid {
			t, err := touba.ParseTime(ended.String)
			if err != nil {
				return nil, err
			}
			r.EndedAt = &t
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

const (
	qInsertRun = `INSERT INTO runs (run_id, queue_id, trigger_ref, attempt, status, error_code, error_message,
		started_at, ended_at) VALUES (?, ?, ?, ?, ?, NULLIF(?, ''), NULLIF(?, ''), ?, ?)`
	qSaveStep = `INSERT INTO run_steps (queue_id, step_id, run_id, output, at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (queue_id, step_id) DO NOTHING`
)

// DropSteps removes the checkpoints of stepIDs (a resume from a step); it
// is durable when DropSteps returns, before the entry is pending again.
func (s *State) DropSteps(ctx context.Context, queueID string, stepIDs []string) error {
	if s.w == nil {
		return sqlitex.ErrReadOnly
	}
	return s.w.Do(ctx, func(ctx context.Context, tx *sqlitex.Tx) error {
		for _, id := range stepIDs {
			if _, err := tx.ExecContext(ctx, `DELETE FROM run_steps WHERE queue_id = ? AND step_id = ?`, queueID, id); err != nil {
				return fmt.Errorf("drop checkpoint %s of %s: %w", id, queueID, err)
			}
		}
		return nil
	})
}
