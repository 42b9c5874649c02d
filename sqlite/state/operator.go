package state

import (
	"context"
	"database/sql"
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// OperatorEvent is one row of the operator's audit trail.
type OperatorEvent = touba.OperatorEvent

// RecordOperator appends ev to the audit trail, durably (one transaction):
// operator actions are rare and each deserves its own fsync.
func (s *State) RecordOperator(ctx context.Context, ev OperatorEvent) error {
	if ev.At.IsZero() {
		ev.At = s.opts.Now()
	}
	_, err := s.db.Write.ExecContext(ctx, `INSERT INTO operator_events (at, action, queue_id, target, outcome, operator, detail, reason)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, touba.FormatTime(ev.At), ev.Action, ev.QueueID, ev.Target, ev.Outcome, ev.Operator, ev.Detail, ev.Reason)
	if err != nil {
		return fmt.Errorf("record operator event: %w", err)
	}
	return nil
}

// OperatorEvents lists audit rows, oldest first: those of one queue entry
// when queueID is set, else the latest limit rows (default 100).
func (s *State) OperatorEvents(ctx context.Context, queueID string, limit int) ([]OperatorEvent, error) {
	if limit <= 0 {
		limit = 100
	}
	q, args := `SELECT seq, at, action, queue_id, target, outcome, operator, detail, reason FROM operator_events`, []any{}
	if queueID != "" {
		q, args = q+` WHERE queue_id = ?`, append(args, queueID)
	}
	q = `SELECT * FROM (` + q + ` ORDER BY seq DESC LIMIT ?) ORDER BY seq`
	rows, err := s.db.Read.QueryContext(ctx, q, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("operator events: %w", err)
	}
	defer rows.Close()
	var out []OperatorEvent
	for rows.Next() {
		var ev OperatorEvent
		var at string
		if err := rows.Scan(&ev.Seq, &at, &ev.Action, &ev.QueueID, &ev.Target, &ev.Outcome, &ev.Operator, &ev.Detail, &ev.Reason); err != nil {
			return nil, fmt.Errorf("operator events: %w", err)
		}
		if ev.At, err = touba.ParseTime(at); err != nil {
			return nil, fmt.Errorf("operator events: %w", err)
		}
		out = append(out, ev)
	}
	return out, rows.Err()
}

// RecordOperators appends evs to the audit trail in one transaction.
func (s *State) RecordOperators(ctx context.Context, evs []OperatorEvent) error {
	if len(evs) == 0 {
		return nil
	}
	err := sqlitex.InTx(ctx, s.db.Write, func(tx *sql.Tx) error {
		for _, ev := range evs {
			if ev.At.IsZero() {
				ev.At = s.opts.Now()
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO operator_events (at, action, queue_id, target, outcome, operator, detail, reason)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, touba.FormatTime(ev.At), ev.Action, ev.QueueID, ev.Target, ev.Outcome, ev.Operator,
				ev.Detail, ev.Reason); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record operator events: %w", err)
	}
	return nil
}
