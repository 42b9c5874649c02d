package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
)

// An effect's first events as columns of its row (migrations/0019_effect_born.sql,
// issue 42): the statement that creates the row records the events of that
// write in born, with the call id they carry in born_call and their time in
// created_at, and writes no effect_events row for them; every later event
// is a row. Two rows and two index entries fewer per effect, the row and
// its events written by one statement as before.
const (
	bornP  = "p"  // prepared
	bornPD = "pd" // prepared, then dispatched (the in-process handlers' PrepareDispatched)
)

// bornEvents are the events born records, in their order.
func bornEvents(born, call, scope, effectID string, at string) ([]touba.EffectEvent, error) {
	if born == "" {
		return nil, nil // no row, or one written by an earlier release: its events are rows
	}
	t, err := touba.ParseTime(at)
	if err != nil {
		return nil, err
	}
	ev := func(state, detail string) touba.EffectEvent {
		return touba.EffectEvent{Scope: scope, EffectID: effectID, CallID: call, State: state, At: t, Detail: detail}
	}
	switch born {
	case bornP:
		return []touba.EffectEvent{ev(touba.EffectPrepared, "prepare attempt 1")}, nil
	case bornPD:
		return []touba.EffectEvent{ev(touba.EffectPrepared, "prepare attempt 1"), ev(touba.EffectDispatched, "dispatch attempt 1")}, nil
	}
	return nil, fmt.Errorf("effect %s/%s: unknown first events %q", scope, effectID, born)
}

// Events returns the audit trail of one effect, in order: the events its
// row records (born), then its effect_events rows. Seq is 0 for the
// former: they have no row.
func (j *Journal) Events(ctx context.Context, scope, effectID string) ([]touba.EffectEvent, error) {
	var born, call, at string
	err := j.db.pool.QueryRow(ctx, `SELECT COALESCE(born, ''), COALESCE(born_call, ''), created_at FROM touba.effects
		WHERE scope = $1 AND effect_id = $2`, scope, effectID).Scan(&born, &call, &at)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("effect events: %w", err)
	}
	out, err := bornEvents(born, call, scope, effectID, at)
	if err != nil {
		return nil, fmt.Errorf("effect events: %w", err)
	}
	rows, err := j.db.pool.Query(ctx, `SELECT seq, scope, effect_id, COALESCE(call_id, ''), state, at, COALESCE(detail, '')
		FROM touba.effect_events WHERE scope = $1 AND effect_id = $2 ORDER BY seq`, scope, effectID)
	if err != nil {
		return nil, fmt.Errorf("effect events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var e touba.EffectEvent
		var at string
		if err := rows.Scan(&e.Seq, &e.Scope, &e.EffectID, &e.CallID, &e.State, &at, &e.Detail); err != nil {
			return nil, err
		}
		if e.At, err = touba.ParseTime(at); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
