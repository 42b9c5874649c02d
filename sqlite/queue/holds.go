package queue

import (
	"context"
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// Paused triggers (touba.HoldStore). The pause is a row of the queue
// file's paused_triggers, read by the lease statement itself (qLease): the
// entries of a paused trigger are never leased, so they spend no attempt
// and cause no lease-and-release churn. Pause and resume go through the
// writer, so they are ordered with the leases: once PauseTrigger returns,
// no later lease takes the trigger's entries.

var _ touba.HoldStore = (*Queue)(nil)

// PauseTrigger pauses p.TriggerRef; changed is false when it already was.
func (q *Queue) PauseTrigger(ctx context.Context, p touba.TriggerPause) (bool, error) {
	var changed bool
	err := q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		res, err := tx.ExecContext(ctx, `INSERT INTO paused_triggers (trigger_ref, paused_at, operator, reason)
			VALUES (?, ?, ?, ?) ON CONFLICT (trigger_ref) DO NOTHING`,
			p.TriggerRef, touba.FormatTime(p.At), p.Operator, p.Reason)
		if err != nil {
			return 0, err
		}
		n, _ := res.RowsAffected()
		changed = n == 1
		return 0, nil
	})
	if err != nil {
		return false, fmt.Errorf("pause %s: %w", p.TriggerRef, err)
	}
	return changed, nil
}

// ResumeTrigger resumes ref; changed is false when it was not paused.
func (q *Queue) ResumeTrigger(ctx context.Context, ref string) (bool, error) {
	var changed bool
	err := q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		res, err := tx.ExecContext(ctx, `DELETE FROM paused_triggers WHERE trigger_ref = ?`, ref)
		if err != nil {
			return 0, err
		}
		n, _ := res.RowsAffected()
		changed = n == 1
		return 0, nil
	})
	if err != nil {
		return false, fmt.Errorf("resume %s: %w", ref, err)
	}
	return changed, nil
}

// PausedTriggers lists the paused triggers by ref.
func (q *Queue) PausedTriggers(ctx context.Context) ([]touba.TriggerPause, error) {
	rows, err := q.db.Read.QueryContext(ctx, `SELECT trigger_ref, paused_at, operator, reason FROM paused_triggers ORDER BY trigger_ref`)
	if err != nil {
		return nil, fmt.Errorf("paused triggers: %w", err)
	}
	defer rows.Close()
	out := []touba.TriggerPause{}
	for rows.Next() {
		var p touba.TriggerPause
		var at string
		if err := rows.Scan(&p.TriggerRef, &at, &p.Operator, &p.Reason); err != nil {
			return nil, fmt.Errorf("paused triggers: %w", err)
		}
		p.At, _ = touba.ParseTime(at)
		out = append(out, p)
	}
	return out, rows.Err()
}

// CountByTrigger counts the entries of each trigger by status; pending
// entries held back behind their concurrency key count as "held" too.
func (q *Queue) CountByTrigger(ctx context.Context) (map[string]map[string]int64, error) {
	rows, err := q.db.Read.QueryContext(ctx, `SELECT trigger_ref, status, COUNT(*), SUM(held) FROM entries
		WHERE status IN ('pending', 'running', 'waiting') GROUP BY trigger_ref, status`)
	if err != nil {
		return nil, fmt.Errorf("count by trigger: %w", err)
	}
	defer rows.Close()
	out := map[string]map[string]int64{}
	for rows.Next() {
		var ref, st string
		var n, held int64
		if err := rows.Scan(&ref, &st, &n, &held); err != nil {
			return nil, fmt.Errorf("count by trigger: %w", err)
		}
		if out[ref] == nil {
			out[ref] = map[string]int64{}
		}
		out[ref][st] = n
		if st == touba.StatusPending && held > 0 {
			out[ref]["held"] = held
		}
	}
	return out, rows.Err()
}
