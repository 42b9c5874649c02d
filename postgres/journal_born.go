package postgres

import (
	"context"
	"fmt"

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

// An effect's outcome as columns of its row too (migrations/
// 0024_effect_settled.sql): the run's outcome statements (finishMany,
// fusedFinish) write it in settled, settled_call, settled_at and
// settled_detail when the row holds none yet, with a seq from the rows'
// sequence (eventSeq) in settled_seq, and write no effect_events row for
// it; a later outcome, and one written by another path (a fence that
// failed, a take-over's unknown, the previous release), is a row. With
// born, an effect whose call answered at once is its own row alone (four
// rows before 0019, two after). Events orders the kept outcome among the
// rows by its seq, as the rows alone were ordered.

// eventSeq is effect_events' seq column's sequence.
const eventSeq = Schema + ".effect_events_seq_seq"

// settleSet is the SET list that keeps the outcome (state, call id, time,
// detail, seq) in the row's settled columns if they are empty, and leaves
// them as they are otherwise (an outcome is kept there already: this one
// is a row). A RETURNING of settled_seq = seq tells which.
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

// effectEvents reads an effect's trail in one statement, so in one
// snapshot (two reads could miss an outcome written between them and show
// a later event without it): first the row's born events (kind 0), then
// its kept outcome and its effect_events rows (kind 1) by seq.
const effectEvents = `WITH x AS (SELECT * FROM touba.effects WHERE scope = $1 AND effect_id = $2)
SELECT 0 AS kind, 0::bigint AS seq, COALESCE(born, ''), COALESCE(born_call, ''), created_at, '' FROM x
UNION ALL
SELECT 1, settled_seq, settled, COALESCE(settled_call, ''), settled_at, COALESCE(settled_detail, '') FROM x WHERE settled_seq IS NOT NULL
UNION ALL
SELECT 1, seq, state, COALESCE(call_id, ''), at, COALESCE(detail, '') FROM touba.effect_events WHERE scope = $1 AND effect_id = $2
ORDER BY kind, seq`

// Events returns the audit trail of one effect, in order: the events its
// row records (born), then its kept outcome (settled) and its
// effect_events rows, by seq. Seq is 0 for the born events: they have no
// row.
func (j *Journal) Events(ctx context.Context, scope, effectID string) ([]touba.EffectEvent, error) {
	rows, err := j.db.pool.Query(ctx, effectEvents, scope, effectID)
	if err != nil {
		return nil, fmt.Errorf("effect events: %w", err)
	}
	defer rows.Close()
	var out []touba.EffectEvent
	for rows.Next() {
		var kind int
		var at string
		e := touba.EffectEvent{Scope: scope, EffectID: effectID}
		if err := rows.Scan(&kind, &e.Seq, &e.State, &e.CallID, &at, &e.Detail); err != nil {
			return nil, fmt.Errorf("effect events: %w", err)
		}
		if kind == 0 {
			// e.State is born here: the events the row's first write recorded.
			if out, err = bornEvents(e.State, e.CallID, scope, effectID, at); err != nil {
				return nil, fmt.Errorf("effect events: %w", err)
			}
			continue
		}
		if e.At, err = touba.ParseTime(at); err != nil {
			return nil, fmt.Errorf("effect %s/%s: event %d time: %w", scope, effectID, e.Seq, err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
