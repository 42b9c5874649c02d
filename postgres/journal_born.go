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

// An effect's first outcome as columns of its row too (migrations/
// 0024_effect_settled.sql): the run's outcome statements (finishMany,
// fusedFinish) write it in settled, settled_call, settled_at and
// settled_detail when the row has none yet, with a seq from the rows'
// sequence (eventSeq) in settled_seq, and write no effect_events row for
// it; a later outcome is a row. With born, an effect whose call answered
// at once is its own row alone (four rows before 0019, two after). Events
// orders the outcome among the rows by its seq, as the rows alone were
// ordered.

// eventSeq is effect_events' seq column's sequence.
const eventSeq = Schema + ".effect_events_seq_seq"

// settleSet is the SET list that keeps the outcome (state, call id, time,
// detail, seq) in the row's settled columns if they are empty, and leaves
// them as they are otherwise (an earlier outcome is there: this one is a
// row). A RETURNING of settled_seq = seq tells which.
func settleSet(state, call, at, detail, seq string) string {
	empty := `CASE WHEN settled_seq IS NULL THEN `
	return `settled = ` + empty + state + ` ELSE settled END, settled_call = ` + empty + call + ` ELSE settled_call END, ` +
		`settled_at = ` + empty + at + ` ELSE settled_at END, settled_detail = ` + empty + detail + ` ELSE settled_detail END, ` +
		`settled_seq = COALESCE(settled_seq, ` + seq + `)`
}

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
// row records (born), then its effect_events rows and its first outcome
// (settled), by seq. Seq is 0 for the born events: they have no row.
func (j *Journal) Events(ctx context.Context, scope, effectID string) ([]touba.EffectEvent, error) {
	var born, call, at string
	var settled settledEvent
	err := j.db.pool.QueryRow(ctx, `SELECT COALESCE(born, ''), COALESCE(born_call, ''), created_at, settled_seq,
			COALESCE(settled, ''), COALESCE(settled_call, ''), COALESCE(settled_at, ''), COALESCE(settled_detail, '')
		FROM touba.effects WHERE scope = $1 AND effect_id = $2`, scope, effectID).Scan(&born, &call, &at, &settled.seq,
		&settled.state, &settled.call, &settled.at, &settled.detail)
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
		if out, err = settled.before(out, e.Seq, scope, effectID); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return settled.before(out, 0, scope, effectID)
}

// settledEvent is an effect's first outcome as its row keeps it (seq nil:
// none yet, or an earlier release's outcome: a row).
type settledEvent struct {
	seq                     *int64
	state, call, at, detail string
}

// before appends the outcome to out if it comes before the row of seq
// (0: after every row) and is not there yet.
func (s *settledEvent) before(out []touba.EffectEvent, seq int64, scope, effectID string) ([]touba.EffectEvent, error) {
	if s.seq == nil || (seq != 0 && seq < *s.seq) {
		return out, nil
	}
	t, err := touba.ParseTime(s.at)
	if err != nil {
		return nil, fmt.Errorf("effect %s/%s: outcome time: %w", scope, effectID, err)
	}
	out = append(out, touba.EffectEvent{Seq: *s.seq, Scope: scope, EffectID: effectID, CallID: s.call, State: s.state, At: t,
		Detail: s.detail})
	s.seq = nil
	return out, nil
}
