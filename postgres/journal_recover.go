package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
)

// noLiveLease selects the scopes no node runs under a live lease: no such
// entry, an entry not running, or one whose lease expired by the
// database's clock. Only their effects may be recovered: the others are
// some node's work in progress.
func (d *db) noLiveLease() string {
	return `NOT EXISTS (SELECT 1 FROM touba.entries l WHERE l.queue_id = effects.scope AND l.status = 'running'
	AND l.lease_expires_at >= ` + d.dbNow() + `)`
}

func recoveryDetail(retryMode, why string) string {
	if retryMode == touba.RetryIdempotencyKey {
		return why + "effect.unknown: the next attempt repeats it with the same idempotency key"
	}
	return why + "run.needs_reconciliation: retry mode " + retryMode + " needs an operator"
}

// Recover turns into unknown every dispatched effect of another handle
// that no node holds under a live lease, and releases such prepared ones
// (SPEC §5's start-up recovery, limited to what no live node is doing).
func (j *Journal) Recover(ctx context.Context) ([]touba.Effect, error) {
	var out []touba.Effect
	err := j.submit("", func(ctx context.Context, tx *Tx) error {
		out = nil
		now := j.db.now()
		rows, err := tx.Query(ctx, `SELECT `+effectCols+` FROM touba.effects WHERE state = 'dispatched'
			AND (owner IS NULL OR owner <> $1) AND `+j.db.noLiveLease()+` ORDER BY created_at, scope, effect_id FOR UPDATE`, j.owner)
		if err != nil {
			return fmt.Errorf("recover effects: %w", err)
		}
		found, err := scanEffects(rows)
		if err != nil {
			return err
		}
		for _, r := range found {
			if err := markUnknown(ctx, tx, r, now, recoveryDetail(r.RetryMode, touba.DetailRecovered)); err != nil {
				return err
			}
			r.State = touba.EffectUnknown
			r.UpdatedAt, _ = touba.ParseTime(now)
			out = append(out, r.Effect)
		}
		_, err = tx.Exec(ctx, `UPDATE touba.effects SET owner = NULL WHERE state = 'prepared' AND owner IS NOT NULL
			AND owner <> $1 AND `+j.db.noLiveLease(), j.owner)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// takeOverEffects runs in the lease transaction (or RequeueRunning's), before the taken-over
// entries are handed to the dispatcher: their dispatched effects become
// unknown, with an audit event naming the node that lost the lease, and
// their prepared effects (never sent) are released for a new attempt.
func (d *db) takeOverEffects(ctx context.Context, tx *Tx, took []takeOver, now string) error {
	for _, t := range took {
		rows, err := tx.Query(ctx, `SELECT `+effectCols+` FROM touba.effects WHERE scope = $1 AND state = 'dispatched' FOR UPDATE`, t.queueID)
		if err != nil {
			return err
		}
		found, err := scanEffects(rows)
		if err != nil {
			return err
		}
		why := fmt.Sprintf("take-over by node %s: the lease of node %s expired with the effect dispatched, outcome unknown; ",
			d.cfg.NodeID, t.oldOwner)
		if t.restart {
			why = fmt.Sprintf("node %s restarted with the effect dispatched by its previous run, outcome unknown; ", t.oldOwner)
		}
		for _, r := range found {
			if err := markUnknown(ctx, tx, r, now, recoveryDetail(r.RetryMode, why)); err != nil {
				return err
			}
			d.log.Warn().Str("event", "effect.unknown").Str("queue_id", r.Scope).Str("effect_id", r.EffectID).
				Str("previous_node", t.oldOwner).Str("retry_mode", r.RetryMode).Msg("effect dispatched by a node whose lease expired; outcome unknown")
		}
		if _, err := tx.Exec(ctx, `UPDATE touba.effects SET owner = NULL WHERE scope = $1 AND state = 'prepared'`, t.queueID); err != nil {
			return err
		}
	}
	return nil
}

func markUnknown(ctx context.Context, tx *Tx, r *row, now, detail string) error {
	_, err := tx.Exec(ctx, `UPDATE touba.effects SET state = 'unknown', updated_at = $1, owner = NULL
		WHERE scope = $2 AND effect_id = $3 AND state = 'dispatched'`, now, r.Scope, r.EffectID)
	if err != nil {
		return fmt.Errorf("mark effect unknown: %w", err)
	}
	return appendEvent(ctx, tx, r.Scope, r.EffectID, r.CallID, touba.EffectUnknown, now, detail)
}

// abandon runs at Close, after the writer stopped: what this handle still
// holds dispatched is unknown, what it holds prepared is released.
func (j *Journal) abandon(ctx context.Context) error {
	tx, err := j.db.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("close effect journal: %w", err)
	}
	defer tx.Rollback(ctx)
	t := &Tx{pool: j.db.pool, tx: tx}
	rows, err := t.Query(ctx, `SELECT `+effectCols+` FROM touba.effects WHERE owner = $1 AND state = 'dispatched'`, j.owner)
	if err != nil {
		return fmt.Errorf("close effect journal: %w", err)
	}
	found, err := scanEffects(rows)
	if err != nil {
		return err
	}
	now := j.db.now()
	for _, r := range found {
		j.db.log.Warn().Str("scope", r.Scope).Str("effect_id", r.EffectID).Msg("effect still dispatched at close; recorded unknown")
		if err := markUnknown(ctx, t, r, now, "closed while dispatched: outcome never reported, unknown"); err != nil {
			return err
		}
	}
	// Only a prepared or dispatched effect has an owner (every outcome,
	// markUnknown and a take-over clear it): the state lets the statement
	// read effects_state's few unsettled entries, not every effect of the
	// history (a full scan at each stop, 20 ms at 90 days of 1,000 a day,
	// growing with the history).
	if _, err := t.Exec(ctx, `UPDATE touba.effects SET owner = NULL WHERE owner = $1 AND state IN ('prepared', 'dispatched')`, j.owner); err != nil {
		return err
	}
	return errors.Join(tx.Commit(ctx))
}

// scanEffects reads every row of rows as an effect, and closes rows: the
// caller then writes to the effects it locked, on the same connection.
func scanEffects(rows pgx.Rows) ([]*row, error) {
	defer rows.Close()
	var found []*row
	for rows.Next() {
		r, err := scanEffect(rows)
		if err != nil {
			return nil, err
		}
		found = append(found, r)
	}
	return found, rows.Err()
}
