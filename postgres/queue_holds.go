package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
)

// Paused triggers (touba.HoldStore) and the bindings' circuits
// (touba.CircuitStore), in tables every node reads (migrations/0003_holds).
// The lease statement skips the entries of paused triggers (queue_lease.go), so
// a pause made through one node holds on all of them from their next lease.

var _ touba.HoldStore = (*Queue)(nil)

// PauseTrigger pauses p.TriggerRef; changed is false when it already was.
func (q *Queue) PauseTrigger(ctx context.Context, p touba.TriggerPause) (bool, error) {
	tag, err := q.db.pool.Exec(ctx, `INSERT INTO touba.paused_triggers (trigger_ref, paused_at, operator, reason)
		VALUES ($1, $2, $3, $4) ON CONFLICT (trigger_ref) DO NOTHING`, p.TriggerRef, touba.FormatTime(p.At), p.Operator, p.Reason)
	if err != nil {
		return false, fmt.Errorf("pause %s: %w", p.TriggerRef, err)
	}
	return tag.RowsAffected() == 1, nil
}

// ResumeTrigger resumes ref; changed is false when it was not paused.
func (q *Queue) ResumeTrigger(ctx context.Context, ref string) (bool, error) {
	tag, err := q.db.pool.Exec(ctx, `DELETE FROM touba.paused_triggers WHERE trigger_ref = $1`, ref)
	if err != nil {
		return false, fmt.Errorf("resume %s: %w", ref, err)
	}
	return tag.RowsAffected() == 1, nil
}

// PausedTriggers lists the paused triggers by ref.
func (q *Queue) PausedTriggers(ctx context.Context) ([]touba.TriggerPause, error) {
	rows, err := q.db.pool.Query(ctx, `SELECT trigger_ref, paused_at, operator, reason FROM touba.paused_triggers ORDER BY trigger_ref`)
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

// Circuits is the bindings' circuits, the cluster's (touba.CircuitStore).
// Each node counts the outcomes of its own calls and writes only when a
// circuit changes state: a closed circuit costs no write per call, and
// reading the state costs one primary-key read per poll interval per
// binding (the dispatcher caches it). The row changes are guarded by the
// state they leave, so two nodes opening or probing at once agree.
type Circuits struct{ db *db }

var _ touba.CircuitStore = (*Circuits)(nil)

const circuitColumns = `tool_ref, state, until, since, calls, failures`

func scanCircuit(row pgx.Row) (touba.CircuitState, error) {
	var c touba.CircuitState
	var until, since string
	if err := row.Scan(&c.ToolRef, &c.State, &until, &since, &c.Calls, &c.Failures); err != nil {
		return c, err
	}
	c.Until, _ = touba.ParseTime(until)
	c.Since, _ = touba.ParseTime(since)
	return c, nil
}

// Circuit returns toolRef's shared state, closed when it has no row.
func (c *Circuits) Circuit(ctx context.Context, toolRef string) (touba.CircuitState, error) {
	s, err := scanCircuit(c.db.pool.QueryRow(ctx, `SELECT `+circuitColumns+` FROM touba.binding_circuits WHERE tool_ref = $1`, toolRef))
	if errors.Is(err, pgx.ErrNoRows) {
		return touba.CircuitState{ToolRef: toolRef, State: touba.CircuitClosed}, nil
	} else if err != nil {
		return s, fmt.Errorf("circuit of %s: %w", toolRef, err)
	}
	return s, nil
}

// OpenCircuit opens s.ToolRef's circuit until s.Until. A probe another
// node holds is left alone: this node's window may have crossed the
// threshold before it read the shared state, and turning that probe back
// into an open circuit would let a second probe be claimed while the
// first is in flight. The probe's own node reopens it when it fails (its
// node id), and a probe whose node died is claimed again (ClaimProbe).
func (c *Circuits) OpenCircuit(ctx context.Context, s touba.CircuitState) error {
	_, err := c.db.pool.Exec(ctx, `INSERT INTO touba.binding_circuits (tool_ref, state, until, since, calls, failures, node_id)
		VALUES ($1, 'open', $2, $3, $4, $5, $6)
		ON CONFLICT (tool_ref) DO UPDATE SET state = 'open', until = EXCLUDED.until, since = EXCLUDED.since,
			calls = EXCLUDED.calls, failures = EXCLUDED.failures, node_id = EXCLUDED.node_id
		WHERE touba.binding_circuits.state <> 'probing' OR touba.binding_circuits.node_id = EXCLUDED.node_id`,
		s.ToolRef, touba.FormatTime(s.Until), touba.FormatTime(s.Since), s.Calls, s.Failures, c.db.cfg.NodeID)
	if err != nil {
		return fmt.Errorf("open circuit of %s: %w", s.ToolRef, err)
	}
	return nil
}

// ClaimProbe gives the probe of an open circuit whose until passed (or
// of a probe claimed longer than stale ago) to one caller of the cluster.
func (c *Circuits) ClaimProbe(ctx context.Context, toolRef string, now time.Time, stale time.Duration) (bool, error) {
	tag, err := c.db.pool.Exec(ctx, `UPDATE touba.binding_circuits SET state = 'probing', since = $2, node_id = $4
		WHERE tool_ref = $1 AND ((state = 'open' AND until <= $2) OR (state = 'probing' AND since <= $3))`,
		toolRef, touba.FormatTime(now), touba.FormatTime(now.Add(-stale)), c.db.cfg.NodeID)
	if err != nil {
		return false, fmt.Errorf("claim the probe of %s: %w", toolRef, err)
	}
	return tag.RowsAffected() == 1, nil
}

// CloseCircuit closes toolRef's circuit.
func (c *Circuits) CloseCircuit(ctx context.Context, toolRef string, now time.Time) error {
	_, err := c.db.pool.Exec(ctx, `UPDATE touba.binding_circuits SET state = 'closed', until = '', since = $2, node_id = $3
		WHERE tool_ref = $1 AND state <> 'closed'`, toolRef, touba.FormatTime(now), c.db.cfg.NodeID)
	if err != nil {
		return fmt.Errorf("close circuit of %s: %w", toolRef, err)
	}
	return nil
}

// Circuits lists the circuits not closed.
func (c *Circuits) Circuits(ctx context.Context) ([]touba.CircuitState, error) {
	rows, err := c.db.pool.Query(ctx, `SELECT `+circuitColumns+` FROM touba.binding_circuits WHERE state <> 'closed' ORDER BY tool_ref`)
	if err != nil {
		return nil, fmt.Errorf("circuits: %w", err)
	}
	defer rows.Close()
	var out []touba.CircuitState
	for rows.Next() {
		s, err := scanCircuit(rows)
		if err != nil {
			return nil, fmt.Errorf("circuits: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// pickPending picks the oldest due pending entries no key holds back.
const pickPending = `SELECT ` + pickCols + ` FROM touba.entries e WHERE status = 'pending' AND NOT held AND (not_before IS NULL OR not_before <= $1)
	AND NOT EXISTS (SELECT 1 FROM touba.paused_triggers p WHERE p.trigger_ref = e.trigger_ref)
	ORDER BY queue_id LIMIT $2 FOR UPDATE SKIP LOCKED`

// readyRefs walks the triggers with leasable entries (CTE refs): a loose
// index scan of entries_ready_trigger, one seek a trigger.
const readyRefs = `WITH RECURSIVE refs(ref) AS (
		(SELECT trigger_ref FROM touba.entries WHERE status = 'pending' AND NOT held ORDER BY trigger_ref LIMIT 1)
		UNION ALL
		SELECT (SELECT trigger_ref FROM touba.entries WHERE status = 'pending' AND NOT held AND trigger_ref > refs.ref
			ORDER BY trigger_ref LIMIT 1) FROM refs WHERE refs.ref IS NOT NULL)`

// pickAround is pickPending while a trigger is paused. pickPending would
// read, in entries_ready, every pending entry of a paused trigger older
// than the first it can lease; pickAround instead walks the triggers that
// have leasable entries in entries_ready_trigger (a loose index scan: one
// seek per trigger, past all of a paused trigger's entries at once), takes
// the oldest due n of each trigger not paused, and keeps the oldest n.
const pickAround = readyRefs + `,
	active AS (SELECT ref FROM refs WHERE ref IS NOT NULL
		AND NOT EXISTS (SELECT 1 FROM touba.paused_triggers p WHERE p.trigger_ref = refs.ref))
	SELECT c.* FROM active CROSS JOIN LATERAL (
		SELECT ` + pickCols + ` FROM touba.entries e WHERE e.status = 'pending' AND NOT e.held AND e.trigger_ref = active.ref
			AND (e.not_before IS NULL OR e.not_before <= $1) ORDER BY e.queue_id COLLATE "C" LIMIT $2 FOR UPDATE SKIP LOCKED) c
	ORDER BY c.queue_id LIMIT $2`

// anyPaused tells whether any trigger is paused (one primary-key probe),
// for claimPlan.
const anyPaused = `SELECT EXISTS (SELECT 1 FROM touba.paused_triggers)`

// takeOverPaused takes over, in the lease transaction tx, the entries of
// paused triggers whose lease expired (their node died or was cut off
// mid-run): back to pending under a new token, so the old node is fenced
// out and no node runs them again while the pause holds (SPEC §6); the
// caller turns their dispatched effects unknown in the same transaction,
// as at any take-over (SPEC §8).
func (q *Queue) takeOverPaused(ctx context.Context, tx *Tx, now string) ([]takeOver, error) {
	rows, err := tx.Query(ctx, `WITH picked AS (
			SELECT queue_id FROM touba.entries e WHERE status = 'running' AND lease_expires_at < `+q.db.dbNow()+`
				AND EXISTS (SELECT 1 FROM touba.paused_triggers p WHERE p.trigger_ref = e.trigger_ref)
			FOR UPDATE SKIP LOCKED),
		old AS (SELECT e.queue_id, COALESCE(e.lease_owner, '') AS owner FROM touba.entries e JOIN picked USING (queue_id))
		UPDATE touba.entries e SET status = 'pending', not_before = NULL, updated_at = $1, lease_owner = NULL,
			lease_expires_at = NULL, lease_token = nextval('touba.lease_tokens')
		FROM old WHERE e.queue_id = old.queue_id
		RETURNING old.queue_id, old.owner`, now)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []takeOver
	for rows.Next() {
		var t takeOver
		if err := rows.Scan(&t.queueID, &t.oldOwner); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}
