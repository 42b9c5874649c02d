package journal

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlwhere"
)

// Effect is one row of the effects table: the journaled state of one
// external write, identified by (Scope, EffectID). Its JSON names are the
// table's column names, for `effects ls --json`.
type Effect = touba.Effect

// Event is one row of the append-only effect_events audit trail.
type Event = touba.EffectEvent

// Filter selects effects for List; empty fields select all.
type Filter = touba.EffectFilter

// CompensationID is the effect id of the compensation of effectID (SPEC §5):
// a distinct effect, so the original stays applied.
func CompensationID(effectID string) string { return touba.CompensationID(effectID) }

// IsCompensation reports whether effectID names a compensation, and of
// which effect.
func IsCompensation(effectID string) (original string, ok bool) {
	return touba.IsCompensation(effectID)
}

const effectCols = `scope, effect_id, tool_ref, operation, fingerprint, retry_mode, state, attempts,
	call_id, receipt_ref, result, error_code, receipt_error_code, created_at, updated_at, owner`

// row is an Effect with the columns only the journal reads.
type row struct {
	Effect
	owner string
}

type scanner interface{ Scan(dest ...any) error }

func scanEffect(s scanner) (*row, error) {
	var r row
	var callID, receipt, result, code, rcode, owner sql.NullString
	var created, updated string
	err := s.Scan(&r.Scope, &r.EffectID, &r.ToolRef, &r.Operation, &r.Fingerprint, &r.RetryMode,
		&r.State, &r.Attempts, &callID, &receipt, &result, &code, &rcode, &created, &updated, &owner)
	if err != nil {
		return nil, err
	}
	r.CallID, r.ReceiptRef, r.ErrorCode = callID.String, receipt.String, code.String
	r.ReceiptErrorCode, r.owner = rcode.String, owner.String
	if result.Valid {
		r.Result = json.RawMessage(result.String)
	}
	if r.CreatedAt, err = touba.ParseTime(created); err != nil {
		return nil, fmt.Errorf("effect %s/%s: created_at: %w", r.Scope, r.EffectID, err)
	}
	if r.UpdatedAt, err = touba.ParseTime(updated); err != nil {
		return nil, fmt.Errorf("effect %s/%s: updated_at: %w", r.Scope, r.EffectID, err)
	}
	return &r, nil
}

const qGetEffect = `SELECT ` + effectCols + ` FROM effects WHERE scope = ? AND effect_id = ?`

// getRow reads one effect in tx, nil when absent.
func getRow(ctx context.Context, tx *wtx, scope, effectID string) (*row, error) {
	return rowOrNil(scanEffect(tx.QueryRowContext(ctx, qGetEffect, scope, effectID)))
}

// readRow reads one effect on the read pool, nil when absent.
func (j *Journal) readRow(ctx context.Context, scope, effectID string) (*row, error) {
	return rowOrNil(scanEffect(j.db.Read.QueryRowContext(ctx, qGetEffect, scope, effectID)))
}

// rowOrNil makes a missing row nil and no error.
func rowOrNil(r *row, err error) (*row, error) {
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return r, err
}

// Get returns the effect (scope, effectID), or nil, nil when there is none.
func (j *Journal) Get(ctx context.Context, scope, effectID string) (*Effect, error) {
	r, err := j.readRow(ctx, scope, effectID)
	if err != nil {
		return nil, fmt.Errorf("get effect: %w", err)
	} else if r == nil {
		return nil, nil
	}
	return &r.Effect, nil
}

// List returns the effects that match f, oldest first.
func (j *Journal) List(ctx context.Context, f Filter) ([]Effect, error) {
	var where sqlwhere.Where
	where.Equal("state", f.State)
	where.Equal("scope", f.Scope)
	q := `SELECT ` + effectCols + ` FROM effects` + where.String() + ` ORDER BY created_at, scope, effect_id`
	args := where.Args()
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	rows, err := j.db.Read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list effects: %w", err)
	}
	defer rows.Close()
	var out []Effect
	for rows.Next() {
		r, err := scanEffect(rows)
		if err != nil {
			return nil, fmt.Errorf("list effects: %w", err)
		}
		out = append(out, r.Effect)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list effects: %w", err)
	}
	return out, nil
}

// Events returns the audit trail of one effect, in order.
func (j *Journal) Events(ctx context.Context, scope, effectID string) ([]Event, error) {
	rows, err := j.db.Read.QueryContext(ctx, `SELECT seq, scope, effect_id, call_id, state, at, detail
		FROM effect_events WHERE scope = ? AND effect_id = ? ORDER BY seq`, scope, effectID)
	if err != nil {
		return nil, fmt.Errorf("effect events: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var callID, detail sql.NullString
		var at string
		if err := rows.Scan(&e.Seq, &e.Scope, &e.EffectID, &callID, &e.State, &at, &detail); err != nil {
			return nil, fmt.Errorf("effect events: %w", err)
		}
		e.CallID, e.Detail = callID.String, detail.String
		if e.At, err = touba.ParseTime(at); err != nil {
			return nil, fmt.Errorf("effect events: at: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("effect events: %w", err)
	}
	return out, nil
}

const qInsertEvent = `INSERT INTO effect_events (scope, effect_id, call_id, state, at, detail)
	VALUES (?, ?, ?, ?, ?, ?)`

// qInsertEventPair is two events in one statement: a new effect's
// prepared and dispatched when they are written together.
const qInsertEventPair = `INSERT INTO effect_events (scope, effect_id, call_id, state, at, detail)
	VALUES (?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?)`

// appendEvent writes one audit row; every transition calls it in the same
// transaction as its update.
func appendEvent(ctx context.Context, tx *wtx, scope, effectID, callID, state, at, detail string) error {
	_, err := tx.ExecContext(ctx, qInsertEvent, scope, effectID, nullable(callID), state, at, nullable(detail))
	if err != nil {
		return fmt.Errorf("append effect event: %w", err)
	}
	return nil
}

// nullable stores "" as NULL, so an absent value reads as absent.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
