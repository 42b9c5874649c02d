package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
)

// RequeueRunning puts back to pending the entries this node id left
// running (a restart under the same --node-id). Other nodes' running
// entries are theirs until their lease expires. Their dispatched effects
// become unknown in the same transaction, as at a take-over: once pending,
// another node may lease them before this node's journal recovery runs,
// and that recovery skips entries under a live lease.
func (q *Queue) RequeueRunning(ctx context.Context) (int64, error) {
	var n int64
	err := q.change("", func(ctx context.Context, tx *Tx) error {
		n = 0
		node := q.db.cfg.NodeID
		rows, err := tx.Query(ctx, `UPDATE touba.entries SET status = 'pending', not_before = NULL, updated_at = $1,
			lease_owner = NULL, lease_expires_at = NULL WHERE status = 'running' AND lease_owner = $2 RETURNING queue_id`,
			q.db.now(), node)
		if err != nil {
			return err
		}
		var took []takeOver
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			took = append(took, takeOver{queueID: id, oldOwner: node, restart: true})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		n = int64(len(took))
		return q.db.takeOverEffects(ctx, tx, took, q.db.now())
	})
	if err != nil {
		return 0, fmt.Errorf("requeue running: %w", err)
	}
	return n, nil
}

// Replay puts failed and parked entries back to pending with the same
// queue id; ids in other states are reported, not changed.
func (q *Queue) Replay(ctx context.Context, ids []string, opt touba.ReplayOptions) ([]touba.ReplayResult, error) {
	var out []touba.ReplayResult
	err := q.change("", func(ctx context.Context, tx *Tx) error {
		out = out[:0]
		var revived []string
		for _, id := range ids {
			var st, ref, carrier string
			var cancel bool
			read := func() error {
				return tx.QueryRow(ctx, `SELECT status, cancel_requested IS NOT NULL, trigger_ref, COALESCE(merged_into, '')
					FROM touba.entries WHERE queue_id = $1 FOR UPDATE`, id).Scan(&st, &cancel, &ref, &carrier)
			}
			err := read()
			if err == nil && st == touba.StatusMerged && carrier != "" {
				// A merged entry's run is its carrier's (SPEC §2.1).
				id = carrier
				err = read()
			}
			if errors.Is(err, pgx.ErrNoRows) {
				out = append(out, touba.ReplayResult{QueueID: id, Reason: "no such entry"})
				continue
			} else if err != nil {
				return err
			}
			if st != touba.StatusFailed && st != touba.StatusParked && st != touba.StatusCancelled {
				out = append(out, touba.ReplayResult{QueueID: id, Reason: "entry is " + st + "; only failed, parked and cancelled entries are replayed"})
				continue
			}
			if st == touba.StatusParked && cancel && !opt.IgnoreCancel {
				if err := q.cancelParked(ctx, tx, id); err != nil {
					return err
				}
				out = append(out, touba.ReplayResult{QueueID: id, From: st, To: touba.StatusCancelled})
				continue
			}
			// A replay runs the entry again from where it stands, its
			// cancel request dropped; a wait its cancel ended, or that timed
			// out (failed WaitTimedOut), carries no outcome, so its step
			// waits anew and takes an offer accepted since (other ended
			// waits stay: the step's result; `queue resume` begins a step
			// again).
			if _, err := tx.Exec(ctx, `WITH w AS (DELETE FROM touba.waits WHERE queue_id = $2 AND state IN ('open', 'cancelled', 'timed_out'))
				UPDATE touba.entries SET status = 'pending', not_before = NULL, attempts = 0, updated_at = $1,
				cancel_requested = NULL, wake_at = NULL, held = held AND hold_on IS NULL, hold_on = NULL,
				program_digest = COALESCE(NULLIF($3, ''), program_digest)
				WHERE queue_id = $2`, q.db.now(), id, opt.Repin[ref]); err != nil {
				return err
			}
			revived = append(revived, id)
			if err := reholdKey(ctx, tx, id); err != nil {
				return err
			}
			out = append(out, touba.ReplayResult{QueueID: id, From: st, To: touba.StatusPending})
		}
		// One lowering of the lease's floor for the whole replay
		// (queue_floor.go).
		return lowerFloor(ctx, tx, q.db.cfg.Now(), revived...)
	})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	return out, nil
}

// cancelParked ends a parked entry asked to cancel while its step ran,
// cancelled (SPEC §2.3: the request survives the park), and lets its
// key's next entries go: what an operator's replay or resume of it does
// unless told to ignore the request. The caller holds the entry's row.
func (q *Queue) cancelParked(ctx context.Context, tx *Tx, queueID string) error {
	var ref string
	var key *string
	var max int
	err := tx.QueryRow(ctx, `UPDATE touba.entries SET status = 'cancelled', error_code = '`+touba.ERunCancelled+`',
		error_message = cancel_requested, cancel_requested = NULL, not_before = NULL, wake_at = NULL, attempts = 0,
		held = false, hold_on = NULL, updated_at = $2
		WHERE queue_id = $1 AND status = 'parked' AND cancel_requested IS NOT NULL
		RETURNING trigger_ref, conc_key, conc_max`, queueID, q.db.now()).Scan(&ref, &key, &max)
	if err != nil {
		return fmt.Errorf("entry %s: cancel at replay: %w", queueID, err)
	}
	if key != nil && max > 0 {
		return release(ctx, tx, ref, *key, max)
	}
	return nil
}
