package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
)

// ParkStranded parks, with ProgramChanged, at most limit pending or
// waiting entries the running program (shape) strands: their trigger is
// gone, or the sleep or wait_for step they wait in is (SPEC §2.3). Each
// lets its key's next entries go and its open wait closes (cancelled: a
// replay waits anew), in one transaction. Entries a lease takes meanwhile
// are skipped (SKIP LOCKED): they are no longer pending, and the run
// meets the change itself.
func (q *Queue) ParkStranded(ctx context.Context, shape touba.ProgramShape, limit int) ([]touba.Stranded, error) {
	live := make([]string, 0, len(shape))
	for ref := range shape {
		live = append(live, ref)
	}
	var out []touba.Stranded
	err := q.change("", func(ctx context.Context, tx *Tx) error {
		out = out[:0]
		rows, err := tx.Query(ctx, `SELECT queue_id, trigger_ref FROM touba.entries
			WHERE status IN ('pending', 'waiting') AND NOT (trigger_ref = ANY($1)) ORDER BY queue_id LIMIT $2 FOR UPDATE SKIP LOCKED`, live, limit)
		if err != nil {
			return err
		}
		for rows.Next() {
			var s touba.Stranded
			if err := rows.Scan(&s.QueueID, &s.TriggerRef); err != nil {
				rows.Close()
				return err
			}
			s.Reason = "trigger " + s.TriggerRef + " is not in the running program"
			out = append(out, s)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(out) < limit {
			if err := strandedWaits(ctx, tx, shape, limit, &out); err != nil {
				return err
			}
		}
		parked := out[:0]
		for _, s := range out {
			ok, err := q.parkStranded(ctx, tx, s)
			if err != nil {
				return err
			}
			if ok {
				parked = append(parked, s)
			}
		}
		out = parked
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("park stranded entries: %w", err)
	}
	return out, nil
}

// strandedWaits adds the waiting entries whose open wait's step shape
// lacks (or has as another kind).
func strandedWaits(ctx context.Context, tx *Tx, shape touba.ProgramShape, limit int, out *[]touba.Stranded) error {
	rows, err := tx.Query(ctx, `SELECT e.queue_id, e.trigger_ref, w.step_id, w.kind FROM touba.entries e
		JOIN touba.waits w ON w.queue_id = e.queue_id WHERE e.status = 'waiting' AND w.state = 'open' ORDER BY e.queue_id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() && len(*out) < limit {
		var id, ref, step, kind string
		if err := rows.Scan(&id, &ref, &step, &kind); err != nil {
			return err
		}
		if why := shape.Strands(ref, step, kind); why != "" {
			*out = append(*out, touba.Stranded{QueueID: id, TriggerRef: ref, Reason: why})
		}
	}
	return rows.Err()
}

// parkStranded parks s and lets its key go; false when s is no longer
// pending or waiting (a lease took it since it was read).
func (q *Queue) parkStranded(ctx context.Context, tx *Tx, s touba.Stranded) (bool, error) {
	var ref string
	var key *string
	var max int
	err := tx.QueryRow(ctx, `UPDATE touba.entries SET status = 'parked', error_code = '`+touba.EProgramChanged+`', error_message = $2,
		not_before = NULL, wake_at = NULL, held = false, hold_on = NULL, updated_at = $3
		WHERE queue_id = $1 AND status IN ('pending', 'waiting') RETURNING trigger_ref, conc_key, conc_max`,
		s.QueueID, s.Reason+" (a reload stranded it); replay it once the program has it again (--repin pins it to the running definition)",
		q.db.now()).Scan(&ref, &key, &max)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("entry %s: %w", s.QueueID, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE touba.waits SET state = 'cancelled', resolved_at = $2 WHERE queue_id = $1 AND state = 'open'`,
		s.QueueID, q.db.now()); err != nil {
		return false, err
	}
	if key != nil && max > 0 {
		return true, release(ctx, tx, ref, *key, max)
	}
	return true, nil
}
