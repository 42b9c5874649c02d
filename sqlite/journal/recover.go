package journal

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// Resolution is an operator's verdict on an unknown effect
// (`touba-trigger effects resolve`).
type Resolution = touba.EffectResolution

// Applied is the resolution of an effect the operator found applied.
func Applied(receiptRef string, result json.RawMessage) Resolution {
	return Resolution{State: touba.EffectApplied, ReceiptRef: receiptRef, Result: result}
}

// NotApplied is the resolution of an effect the operator found not applied;
// it releases the identity for a new attempt with the same effect id.
func NotApplied() Resolution { return Resolution{State: touba.EffectNotApplied} }

// Resolve records an operator's verdict on an unknown effect, with an audit
// event naming the operator action. An effect that is not unknown is
// refused with code EffectNotUnknown, so an applied effect is never
// rewritten. A receipt or result holding a secret is refused with code
// SecretValueRefused and nothing is stored: the effect stays unknown and the
// operator can resolve it again.
func (j *Journal) Resolve(ctx context.Context, scope, effectID string, r Resolution) error {
	raw, detail, err := r.Check(scope, effectID)
	if err != nil {
		return err
	}
	if j.holdsSecret(r.ReceiptRef, r.Operator, r.Reason) || (raw != nil && j.resultHoldsSecret(raw)) {
		return secretRefused("resolution")
	}
	var result any
	if raw != nil {
		result = string(raw)
	}
	return j.submit(ctx, func(ctx context.Context, tx *wtx) error {
		cur, err := getRow(ctx, tx, scope, effectID)
		if err != nil {
			return fmt.Errorf("resolve effect: %w", err)
		} else if cur == nil {
			return fmt.Errorf("resolve effect %s/%s: no such effect", scope, effectID)
		}
		now := j.stamp()
		if j.orphaned(cur) {
			// Its call ended in this process without an outcome on disk:
			// unknown, recorded as such before the verdict.
			if err := j.markUnknown(ctx, tx, cur, now, OrphanDetail); err != nil {
				return err
			}
			cur.State = touba.EffectUnknown
		}
		if cur.State != touba.EffectUnknown {
			return touba.Errorf(touba.EEffectNotUnknown, "effect %s/%s is %s, not unknown", scope, effectID, cur.State)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE effects SET state = ?, receipt_ref = ?, result = ?, error_code = NULL,
			receipt_error_code = NULL, updated_at = ?, owner = NULL
			WHERE scope = ? AND effect_id = ? AND state = 'unknown'`,
			r.State, nullable(r.ReceiptRef), result, now, scope, effectID); err != nil {
			return fmt.Errorf("resolve effect: %w", err)
		}
		return appendEvent(ctx, tx, scope, effectID, cur.CallID, r.State, now, detail)
	})
}

// RecoveryDetail begins the audit detail of an effect that start-up
// recovery found dispatched and recorded unknown; the rest names the event
// of SPEC §5: effect.unknown when the retry mode lets the next attempt
// repeat it safely, run.needs_reconciliation when an operator must decide.
const RecoveryDetail = touba.DetailRecovered

func recoveryDetail(retryMode string) string {
	if retryMode == touba.RetryIdempotencyKey {
		return RecoveryDetail + "effect.unknown: the next attempt repeats it with the same idempotency key"
	}
	return RecoveryDetail + "run.needs_reconciliation: retry mode " + retryMode + " needs an operator"
}

// Recover is the start-up recovery (SPEC §5): every dispatched effect not
// held by this handle becomes unknown, never assumed applied or not, with
// one audit event each; prepared effects left by a previous process are
// released for a new attempt (their state is untouched: nothing was sent).
// It returns the effects it made unknown; the caller logs effect.unknown or
// run.needs_reconciliation for each. Call it once, under the lock, before
// the first Prepare.
func (j *Journal) Recover(ctx context.Context) ([]Effect, error) {
	var out []Effect
	err := j.submit(ctx, func(ctx context.Context, tx *wtx) error {
		out = nil
		rows, err := tx.QueryContext(ctx, `SELECT `+effectCols+` FROM effects
			WHERE state = 'dispatched' AND (owner IS NULL OR owner != ?) ORDER BY created_at, scope, effect_id`, j.owner)
		if err != nil {
			return fmt.Errorf("recover effects: %w", err)
		}
		var found []*row
		for rows.Next() {
			r, err := scanEffect(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("recover effects: %w", err)
			}
			found = append(found, r)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return fmt.Errorf("recover effects: %w", err)
		}
		now := j.stamp()
		for _, r := range found {
			if err := j.markUnknown(ctx, tx, r, now, recoveryDetail(r.RetryMode)); err != nil {
				return err
			}
			r.State = touba.EffectUnknown
			r.UpdatedAt, _ = touba.ParseTime(now)
			out = append(out, r.Effect)
		}
		_, err = tx.ExecContext(ctx, `UPDATE effects SET owner = NULL
			WHERE state = 'prepared' AND owner IS NOT NULL AND owner != ?`, j.owner)
		if err != nil {
			return fmt.Errorf("recover effects: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (j *Journal) markUnknown(ctx context.Context, tx *wtx, r *row, now, detail string) error {
	_, err := tx.ExecContext(ctx, `UPDATE effects SET state = 'unknown', updated_at = ?, owner = NULL
		WHERE scope = ? AND effect_id = ? AND state = 'dispatched'`, now, r.Scope, r.EffectID)
	if err != nil {
		return fmt.Errorf("mark effect unknown: %w", err)
	}
	return appendEvent(ctx, tx, r.Scope, r.EffectID, r.CallID, touba.EffectUnknown, now, detail)
}

// abandon runs at Close, after the writer stopped: effects this handle
// still holds are dispatched ones whose outcome was never reported, now
// unknown, and prepared ones that were never sent, now released.
func (j *Journal) abandon(ctx context.Context) error {
	rows, err := j.db.Write.QueryContext(ctx, `SELECT `+effectCols+` FROM effects
		WHERE owner = ? AND state = 'dispatched'`, j.owner)
	if err != nil {
		return fmt.Errorf("close effect journal: %w", err)
	}
	var found []*row
	for rows.Next() {
		r, err := scanEffect(rows)
		if err != nil {
			rows.Close()
			return fmt.Errorf("close effect journal: %w", err)
		}
		found = append(found, r)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("close effect journal: %w", err)
	}
	err = sqlitex.InTx(ctx, j.db.Write, func(sqltx *sql.Tx) error {
		tx := sqlitex.WrapTx(sqltx) // the writer and its statements are gone
		now := j.stamp()
		for _, r := range found {
			j.log.Warn().Str("scope", r.Scope).Str("effect_id", r.EffectID).Str("call_id", r.CallID).
				Msg("effect still dispatched at close; recorded unknown")
			if err := j.markUnknown(ctx, tx, r, now, "closed while dispatched: outcome never reported, unknown"); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `UPDATE effects SET owner = NULL WHERE owner = ?`, j.owner)
		return err
	})
	if err != nil {
		return fmt.Errorf("close effect journal: %w", err)
	}
	return nil
}
