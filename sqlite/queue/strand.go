package queue

import (
	"context"
	"database/sql"
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// ParkStranded parks, with ProgramChanged, at most limit pending or
// waiting entries the running program (shape) strands: their trigger is
// gone, or the sleep or wait_for step they wait in is (SPEC §2.3). Each
// lets its key's next entries go and its open wait closes (state
// cancelled: a replay waits anew), in the one transaction.
func (q *Queue) ParkStranded(ctx context.Context, shape touba.ProgramShape, limit int) ([]touba.Stranded, error) {
	var out []touba.Stranded
	err := q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		var err error
		out, err = stranded(ctx, tx, shape, limit)
		if err != nil {
			return 0, err
		}
		var moved int64
		for _, s := range out {
			wasPending, err := q.parkStranded(ctx, tx, s)
			if err != nil {
				return 0, err
			}
			if wasPending {
				moved--
			}
		}
		return moved, nil
	})
	if err != nil {
		return nil, fmt.Errorf("park stranded entries: %w", err)
	}
	return out, nil
}

// stranded finds them: entries of triggers shape lacks, then waiting
// entries whose open wait's step shape lacks (or has as another kind).
func stranded(ctx context.Context, tx *sqlitex.Tx, shape touba.ProgramShape, limit int) ([]touba.Stranded, error) {
	var out []touba.Stranded
	rows, err := tx.QueryContext(ctx, `SELECT DISTINCT trigger_ref FROM entries WHERE status IN ('pending', 'waiting')`)
	if err != nil {
		return nil, err
	}
	var gone []string
	for rows.Next() {
		var ref string
		if err := rows.Scan(&ref); err != nil {
			rows.Close()
			return nil, err
		}
		if _, ok := shape[ref]; !ok {
			gone = append(gone, ref)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, ref := range gone {
		rows, err := tx.QueryContext(ctx, `SELECT queue_id FROM entries WHERE trigger_ref = ? AND status IN ('pending', 'waiting')
			ORDER BY queue_id LIMIT ?`, ref, limit-len(out))
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			s := touba.Stranded{TriggerRef: ref, Reason: "trigger " + ref + " is not in the running program"}
			if err := rows.Scan(&s.QueueID); err != nil {
				rows.Close()
				return nil, err
			}
			out = append(out, s)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(out) >= limit {
			return out, err
		}
	}
	rows, err = tx.QueryContext(ctx, `SELECT e.queue_id, e.trigger_ref, w.step_id, w.kind FROM entries e JOIN waits w ON w.queue_id = e.queue_id
		WHERE e.status = 'waiting' AND w.state = 'open' ORDER BY e.queue_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() && len(out) < limit {
		var id, ref, step, kind string
		if err := rows.Scan(&id, &ref, &step, &kind); err != nil {
			return nil, err
		}
		if why := shape.Strands(ref, step, kind); why != "" {
			out = append(out, touba.Stranded{QueueID: id, TriggerRef: ref, Reason: why})
		}
	}
	return out, rows.Err()
}

// parkStranded parks s and lets its key go; it tells whether s was
// pending (the pending count moves).
func (q *Queue) parkStranded(ctx context.Context, tx *sqlitex.Tx, s touba.Stranded) (bool, error) {
	var st, ref string
	var key sql.NullString
	var max int
	err := tx.QueryRowContext(ctx, `SELECT status, trigger_ref, conc_key, conc_max FROM entries WHERE queue_id = ?`, s.QueueID).
		Scan(&st, &ref, &key, &max)
	if err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE entries SET status = 'parked', error_code = '`+touba.EProgramChanged+`',
		error_message = ?, not_before = NULL, wake_at = NULL, held = 0, hold_on = NULL, updated_at = ? WHERE queue_id = ?`,
		s.Reason+" (a reload stranded it); replay it once the program has it again (--repin pins it to the running definition)",
		q.now(), s.QueueID); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE waits SET state = 'cancelled', resolved_at = ? WHERE queue_id = ? AND state = 'open'`,
		q.now(), s.QueueID); err != nil {
		return false, err
	}
	if key.Valid && max > 0 {
		if _, err := tx.ExecContext(ctx, releaseNext, ref, key.String, max); err != nil {
			return false, fmt.Errorf("release key of %s: %w", s.QueueID, err)
		}
	}
	return st == touba.StatusPending, nil
}
