package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// Circuits keeps the binding circuits in the queue file
// (touba.CircuitStore), as PostgreSQL keeps them for its nodes: the
// dispatcher writes only a circuit's transitions, and reads its state at
// most once per poll interval, so an open circuit outlives a restart.
type Circuits struct{ q *Queue }

// Circuits returns the queue file's circuit store.
func (q *Queue) Circuits() *Circuits { return &Circuits{q: q} }

var _ touba.CircuitStore = (*Circuits)(nil)

const circuitColumns = `tool_ref, state, until, since, calls, failures`

func scanCircuit(row interface{ Scan(...any) error }) (touba.CircuitState, error) {
	var c touba.CircuitState
	var until, since string
	if err := row.Scan(&c.ToolRef, &c.State, &until, &since, &c.Calls, &c.Failures); err != nil {
		return c, err
	}
	c.Until, _ = touba.ParseTime(until)
	c.Since, _ = touba.ParseTime(since)
	return c, nil
}

// Circuit returns toolRef's state, closed when it has no row.
func (c *Circuits) Circuit(ctx context.Context, toolRef string) (touba.CircuitState, error) {
	s, err := scanCircuit(c.q.db.Read.QueryRowContext(ctx, `SELECT `+circuitColumns+` FROM binding_circuits WHERE tool_ref = ?`, toolRef))
	if errors.Is(err, sql.ErrNoRows) {
		return touba.CircuitState{ToolRef: toolRef, State: touba.CircuitClosed}, nil
	} else if err != nil {
		return s, fmt.Errorf("circuit of %s: %w", toolRef, err)
	}
	return s, nil
}

// exec runs stmt through the writer and returns the rows it changed.
func (c *Circuits) exec(stmt string, args ...any) (int64, error) {
	var n int64
	err := c.q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		res, err := tx.ExecContext(ctx, stmt, args...)
		if err != nil {
			return 0, err
		}
		n, _ = res.RowsAffected()
		return 0, nil
	})
	return n, err
}

// OpenCircuit opens s.ToolRef's circuit until s.Until, from any state:
// one process holds the file, so a probe in flight is its own.
func (c *Circuits) OpenCircuit(ctx context.Context, s touba.CircuitState) error {
	_, err := c.exec(`INSERT INTO binding_circuits (tool_ref, state, until, since, calls, failures) VALUES (?1, 'open', ?2, ?3, ?4, ?5)
		ON CONFLICT (tool_ref) DO UPDATE SET state = 'open', until = excluded.until, since = excluded.since,
			calls = excluded.calls, failures = excluded.failures`,
		s.ToolRef, touba.FormatTime(s.Until), touba.FormatTime(s.Since), s.Calls, s.Failures)
	if err != nil {
		return fmt.Errorf("open circuit of %s: %w", s.ToolRef, err)
	}
	return nil
}

// ClaimProbe moves an open circuit whose until passed (or a probe
// claimed longer than stale ago: its process died) to probing.
func (c *Circuits) ClaimProbe(ctx context.Context, toolRef string, now time.Time, stale time.Duration) (bool, error) {
	n, err := c.exec(`UPDATE binding_circuits SET state = 'probing', since = ?2
		WHERE tool_ref = ?1 AND ((state = 'open' AND until <= ?2) OR (state = 'probing' AND since <= ?3))`,
		toolRef, touba.FormatTime(now), touba.FormatTime(now.Add(-stale)))
	if err != nil {
		return false, fmt.Errorf("claim the probe of %s: %w", toolRef, err)
	}
	return n == 1, nil
}

// CloseCircuit closes toolRef's circuit.
func (c *Circuits) CloseCircuit(ctx context.Context, toolRef string, now time.Time) error {
	if _, err := c.exec(`UPDATE binding_circuits SET state = 'closed', until = '', since = ?2 WHERE tool_ref = ?1 AND state <> 'closed'`,
		toolRef, touba.FormatTime(now)); err != nil {
		return fmt.Errorf("close circuit of %s: %w", toolRef, err)
	}
	return nil
}

// Circuits lists the circuits not closed.
func (c *Circuits) Circuits(ctx context.Context) ([]touba.CircuitState, error) {
	rows, err := c.q.db.Read.QueryContext(ctx, `SELECT `+circuitColumns+` FROM binding_circuits WHERE state <> 'closed' ORDER BY tool_ref`)
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
