package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

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
	changed, err := q.changeHold(`INSERT INTO paused_triggers (trigger_ref, paused_at, operator, reason)
			VALUES (?, ?, ?, ?) ON CONFLICT (trigger_ref) DO NOTHING`,
		p.TriggerRef, touba.FormatTime(p.At), p.Operator, p.Reason)
	if err != nil {
		return false, fmt.Errorf("pause %s: %w", p.TriggerRef, err)
	}
	return changed, nil
}

// ResumeTrigger resumes ref; changed is false when it was not paused.
func (q *Queue) ResumeTrigger(ctx context.Context, ref string) (bool, error) {
	changed, err := q.changeHold(`DELETE FROM paused_triggers WHERE trigger_ref = ?`, ref)
	if err != nil {
		return false, fmt.Errorf("resume %s: %w", ref, err)
	}
	return changed, nil
}

// changeHold runs stmt, which inserts or deletes at most one row of
// paused_triggers, in the writer's next batch and recounts the paused
// triggers; changed is whether it did change a row.
func (q *Queue) changeHold(stmt string, args ...any) (changed bool, err error) {
	err = q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		res, err := tx.ExecContext(ctx, stmt, args...)
		if err != nil {
			return 0, err
		}
		n, _ := res.RowsAffected()
		changed = n == 1
		return 0, q.countPaused(ctx, tx)
	})
	return changed, err
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

// Leasing around paused triggers. qLease reads entries_ready in queue_id
// order and would read every pending entry of a paused trigger older than
// the first it can lease (100,000 paused entries: 50 ms of the writer per
// lease, the writer held meanwhile). While any trigger is paused, the lease instead seeks, in
// entries_ready_trigger, the triggers with leasable entries one by one,
// jumping over each paused trigger's entries in one seek, takes the oldest
// due n of each other trigger, and leases the oldest n of those.

const (
	qNextReadyRef = `SELECT trigger_ref FROM entries INDEXED BY entries_ready_trigger WHERE status = 'pending' AND held = 0 AND trigger_ref > ?
		ORDER BY trigger_ref LIMIT 1`
	qReadyOfRef = `SELECT queue_id FROM entries INDEXED BY entries_ready_trigger WHERE status = 'pending' AND held = 0 AND trigger_ref = ?
		AND (not_before IS NULL OR not_before <= ?) ORDER BY queue_id LIMIT ?`
)

// countPaused refreshes q.paused from the table; tx is the writer's.
func (q *Queue) countPaused(ctx context.Context, tx *sqlitex.Tx) error {
	var n int64
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM paused_triggers`).Scan(&n); err != nil {
		return err
	}
	q.paused.Store(n)
	return nil
}

// leaseAround is Lease while triggers are paused.
func (q *Queue) leaseAround(ctx context.Context, tx *sqlitex.Tx, now string, n int) ([]*touba.Delivery, error) {
	paused := map[string]bool{}
	rows, err := tx.QueryContext(ctx, `SELECT trigger_ref FROM paused_triggers`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var ref string
		if err := rows.Scan(&ref); err != nil {
			rows.Close()
			return nil, err
		}
		paused[ref] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var ids []string
	for ref := ""; ; {
		if err := tx.QueryRowContext(ctx, qNextReadyRef, ref).Scan(&ref); errors.Is(err, sql.ErrNoRows) {
			break
		} else if err != nil {
			return nil, err
		}
		if paused[ref] {
			continue
		}
		rows, err := tx.QueryContext(ctx, qReadyOfRef, ref, now, n)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	slices.Sort(ids)
	ids = ids[:min(n, len(ids))]
	args := []any{now}
	for _, id := range ids {
		args = append(args, id)
	}
	rows, err = tx.QueryContext(ctx, `UPDATE entries SET status = 'running', attempts = attempts + 1, lease_token = lease_token + 1,
		updated_at = ? WHERE status = 'pending' AND queue_id IN (?`+strings.Repeat(", ?", len(ids)-1)+`) RETURNING `+entryColumns, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out, err := scanEntries(rows)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b *touba.Delivery) int { return strings.Compare(a.QueueID, b.QueueID) })
	return out, nil
}
