package postgres

import (
	"context"
	"fmt"
	"time"
)

// Workers records which nodes have workers of each worker binding
// connected (SPEC §4.3; table worker_seen, migrations/0020), so any node
// can tell whether a binding has a worker anywhere. The times are the
// database's clock, like the leases'.
type Workers struct{ db *db }

// Workers is the store's worker presence.
func (s *Store) Workers() *Workers { return &Workers{db: s.db} }

// workerSeenKept is how long a record outlives its node's last write: a
// node id that is gone (the default id is hostname:pid, new at each
// start) leaves no row behind for longer (SPEC §8.1).
const workerSeenKept = time.Hour

// Seen records that this node has a worker of each of refs connected now,
// and forgets the records no node wrote within workerSeenKept.
func (w *Workers) Seen(ctx context.Context, refs []string) error {
	if refs == nil {
		refs = []string{}
	}
	ctx, cancel := w.db.bounded(ctx)
	defer cancel()
	_, err := w.db.pool.Exec(ctx, `WITH gone AS (DELETE FROM touba.worker_seen WHERE seen_at < `+w.db.dbTime(-workerSeenKept)+`)
		INSERT INTO touba.worker_seen (tool_ref, node_id, seen_at)
		SELECT r, $2, `+w.db.dbNow()+` FROM unnest($1::text[]) r
		ON CONFLICT (tool_ref, node_id) DO UPDATE SET seen_at = EXCLUDED.seen_at`, refs, w.db.cfg.NodeID)
	if err != nil {
		return fmt.Errorf("record the workers connected: %w", err)
	}
	return nil
}

// SeenWithin is the worker bindings some node had a worker of connected
// within d, each with how many nodes had one.
func (w *Workers) SeenWithin(ctx context.Context, d time.Duration) (map[string]int, error) {
	ctx, cancel := w.db.bounded(ctx)
	defer cancel()
	rows, err := w.db.pool.Query(ctx, `SELECT tool_ref, COUNT(*) FROM touba.worker_seen
		WHERE seen_at >= `+w.db.dbTime(-d)+` GROUP BY tool_ref`)
	if err != nil {
		return nil, fmt.Errorf("read the workers connected: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var ref string
		var n int
		if err := rows.Scan(&ref, &n); err != nil {
			return nil, err
		}
		out[ref] = n
	}
	return out, rows.Err()
}
