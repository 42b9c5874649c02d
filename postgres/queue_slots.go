package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Slots keeps the bindings' max_concurrency slots in the database, so the
// bound holds across every node (touba.SlotStore; table binding_slots in
// migrations/0002). A slot belongs to an entry's lease: it needs no
// renewal of its own (the run renews the lease) and frees by itself when
// the lease ends, the node having finished, crashed or been cut off.
type Slots struct{ db *db }

// slotLock serialises the takers of one binding's slots, across nodes.
// The choice of a free slot is then made on a snapshot taken after the
// lock, which sees every slot taken before it.
const slotLock = `SELECT pg_advisory_xact_lock(hashtextextended('slot:' || $1, 7))`

// takeSlot takes the lowest slot of $1 among 1..$2 that no live lease
// holds, for entry $3 if it is still leased under token $4.
func (d *db) takeSlot() string {
	return `WITH free AS (
	SELECT g AS slot FROM generate_series(1, $2::int) g
	WHERE EXISTS (SELECT 1 FROM touba.entries WHERE queue_id = $3 AND lease_token = $4 AND status = 'running')
	  AND NOT EXISTS (SELECT 1 FROM touba.binding_slots s JOIN touba.entries e ON e.queue_id = s.queue_id AND e.lease_token = s.lease_token
		WHERE s.tool_ref = $1 AND s.slot = g AND e.status = 'running' AND e.lease_expires_at >= ` + d.dbNow() + `)
	ORDER BY g LIMIT 1)
INSERT INTO touba.binding_slots (tool_ref, slot, queue_id, lease_token, node_id, taken_at)
SELECT $1, slot, $3, $4, $5, $6 FROM free
ON CONFLICT (tool_ref, slot) DO UPDATE SET queue_id = EXCLUDED.queue_id, lease_token = EXCLUDED.lease_token,
	node_id = EXCLUDED.node_id, taken_at = EXCLUDED.taken_at
RETURNING slot`
}

// TakeSlot takes a free slot of toolRef for the entry leased under token.
// It runs in a short transaction of its own, outside the writer's
// batches: a taker waits on the binding's lock, and must not make a batch
// of other writes wait with it.
func (s *Slots) TakeSlot(ctx context.Context, toolRef string, max int, queueID string, token int64) (int, bool, error) {
	var slot int
	ctx, cancel := s.db.bounded(ctx)
	defer cancel()
	err := pgx.BeginTxFunc(ctx, s.db.pool, pgx.TxOptions{BeginQuery: s.db.begin}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, slotLock, toolRef); err != nil {
			return err
		}
		return tx.QueryRow(ctx, s.db.takeSlot(), toolRef, max, queueID, token, s.db.cfg.NodeID, s.db.now()).Scan(&slot)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	} else if err != nil {
		return 0, false, fmt.Errorf("take a slot of %s: %w", toolRef, err)
	}
	return slot, true, nil
}

// ReleaseSlot frees slot if the entry still holds it under token. A
// release that fails leaves the slot to free itself when the lease ends.
func (s *Slots) ReleaseSlot(ctx context.Context, toolRef string, slot int, queueID string, token int64) error {
	ctx, cancel := s.db.bounded(ctx)
	defer cancel()
	_, err := s.db.pool.Exec(ctx, `DELETE FROM touba.binding_slots WHERE tool_ref = $1 AND slot = $2 AND queue_id = $3 AND lease_token = $4`,
		toolRef, slot, queueID, token)
	if err != nil {
		return fmt.Errorf("release slot %d of %s: %w", slot, toolRef, err)
	}
	return nil
}

// SlotsInUse counts toolRef's slots held by live leases, on every node:
// what the fair lease's gate leaves free (dispatcher passable).
func (s *Slots) SlotsInUse(ctx context.Context, toolRef string) (int, error) {
	ctx, cancel := s.db.bounded(ctx)
	defer cancel()
	var n int
	err := s.db.pool.QueryRow(ctx, `SELECT COUNT(*) FROM touba.binding_slots s
		JOIN touba.entries e ON e.queue_id = s.queue_id AND e.lease_token = s.lease_token
		WHERE s.tool_ref = $1 AND e.status = 'running' AND e.lease_expires_at >= `+s.db.dbNow(), toolRef).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("slots in use of %s: %w", toolRef, err)
	}
	return n, nil
}
