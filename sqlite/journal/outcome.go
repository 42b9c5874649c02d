package journal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/commit"
	"github.com/touba/touba-trigger/internal/jsonx"
)

// ErrTransition is matched (errors.Is) by the error of a transition the
// state machine does not allow, such as any change of an applied effect.
var ErrTransition = touba.ErrTransition

// Outcome is the result of one call, as Finish records it.
type Outcome = touba.EffectOutcome

const qDispatch = `UPDATE effects SET state = 'dispatched', updated_at = ?
	WHERE scope = ? AND effect_id = ? AND state = 'prepared' AND call_id = ? AND owner = ?
	RETURNING attempts`

// Dispatch moves the effect held by callID from prepared to dispatched,
// durably, just before the request leaves (SPEC §5).
func (j *Journal) Dispatch(ctx context.Context, scope, effectID, callID string) error {
	return j.DispatchRequest(ctx, scope, effectID, callID, "")
}

// DispatchRequest is Dispatch that also records, in the dispatched event's
// detail, the request the call sends (touba.RequestDetail): never one that
// holds a secret value.
func (j *Journal) DispatchRequest(ctx context.Context, scope, effectID, callID, request string) error {
	note := touba.RequestDetail(request, j.holdsSecret(request))
	return j.submit(ctx, func(ctx context.Context, tx *wtx) error {
		return j.dispatchTx(ctx, tx, scope, effectID, callID, note)
	})
}

// dispatchTx is Dispatch inside the writer's transaction; note ends the
// event's detail.
func (j *Journal) dispatchTx(ctx context.Context, tx *wtx, scope, effectID, callID, note string) error {
	// The guarded update is the check: it matches only the row callID
	// holds in prepared. Only when it matches nothing is the row read,
	// to say why.
	now := j.stamp()
	var attempts int
	err := errNotHeld
	if j.holds(scope, effectID, callID) {
		err = tx.QueryRowContext(ctx, qDispatch, now, scope, effectID, callID, j.owner).Scan(&attempts)
	}
	if errors.Is(err, sql.ErrNoRows) || errors.Is(err, errNotHeld) {
		r, herr := j.heldRow(ctx, tx, scope, effectID, callID, touba.EffectDispatched)
		if herr != nil {
			return herr
		}
		return fmt.Errorf("dispatch effect %s/%s: %w: %s -> dispatched", scope, effectID, ErrTransition, r.State)
	} else if err != nil {
		return fmt.Errorf("dispatch effect: %w", err)
	}
	return appendEvent(ctx, tx, scope, effectID, callID, touba.EffectDispatched, now,
		fmt.Sprintf("dispatch attempt %d", attempts)+note)
}

// errNotHeld stands for "this process does not hold the claim": the slow
// path then reads the row to name the reason.
var errNotHeld = errors.New("claim not held")

// heldRow reads an effect that callID must hold: in this process (the
// claim) and on disk (call_id and owner). An effect in no state that a call
// can hold (applied, not_applied, unknown) is ErrTransition, whoever asks.
// When the file says callID no longer holds the effect (another handle
// recovered or retried it), callID's claim is dropped too, so that it does
// not block this identity in this process for good. Its refusals are
// commit.Refused (they write nothing); a failed read is the transaction's.
func (j *Journal) heldRow(ctx context.Context, tx *wtx, scope, effectID, callID, to string) (*row, error) {
	r, err := getRow(ctx, tx, scope, effectID)
	if err != nil {
		return nil, fmt.Errorf("effect %s/%s: %w", scope, effectID, err)
	}
	held := r != nil && r.CallID == callID && r.owner == j.owner &&
		(r.State == touba.EffectPrepared || r.State == touba.EffectDispatched)
	if !held {
		j.release(scope, effectID, callID)
	}
	if r == nil {
		return nil, commit.Refused(fmt.Errorf("effect %s/%s: no such effect", scope, effectID))
	}
	if r.State != touba.EffectPrepared && r.State != touba.EffectDispatched {
		return nil, commit.Refused(fmt.Errorf("effect %s/%s: %w: %s -> %s", scope, effectID, ErrTransition, r.State, to))
	}
	if !j.holds(scope, effectID, callID) || r.CallID != callID || r.owner != j.owner {
		return nil, commit.Refused(touba.Errorf(touba.EEffectInProgress, "effect %s/%s is held by call %s, not %s", scope, effectID, r.CallID, callID))
	}
	return r, nil
}

const qFinish = `UPDATE effects SET state = ?, receipt_ref = ?, result = ?, error_code = ?,
	receipt_error_code = ?, updated_at = ?, owner = NULL
	WHERE scope = ? AND effect_id = ? AND state IN ('prepared', 'dispatched') AND call_id = ? AND owner = ?`

// Finish records the outcome of the call that holds the effect (from
// dispatched, or from prepared when the request never left) and releases
// the identity.
//
// When the receipt, result, error codes or detail hold a resolved secret,
// the outcome state is still stored, because forgetting that a write was
// applied would let it be repeated, but the receipt, result and error codes
// are not: error_code becomes SecretValueRefused and Finish returns that
// code. An applied effect without a result is then EffectResultUnavailable
// for later steps, which parks the entry for an operator. An invalid JSON
// result is dropped the same way.
func (j *Journal) Finish(ctx context.Context, o Outcome) error {
	switch o.State {
	case touba.EffectApplied, touba.EffectNotApplied, touba.EffectUnknown:
	default:
		return fmt.Errorf("finish effect %s/%s: outcome %q is not applied, not_applied or unknown", o.Scope, o.EffectID, o.State)
	}
	var dropped error
	detail := "outcome " + o.State
	switch {
	case j.holdsSecret(o.ReceiptRef, o.ErrorCode, o.ReceiptErrorCode, o.Detail) || j.resultHoldsSecret(o.Result):
		dropped = secretRefused("effect outcome")
		o.ReceiptRef, o.Result, o.ErrorCode, o.ReceiptErrorCode = "", nil, touba.ESecretValueRefused, ""
		detail += "; receipt and result refused: they held a secret value"
	case o.Result != nil && !jsonx.Valid(o.Result):
		dropped = fmt.Errorf("finish effect %s/%s: result is not valid JSON; not stored", o.Scope, o.EffectID)
		o.Result = nil
		detail += "; result not stored: not valid JSON"
	default:
		detail += describe(o.ReceiptRef, o.ErrorCode, o.ReceiptErrorCode, o.Detail)
	}
	// Shared, no savepoint: the guarded update writes nothing when it
	// refuses (the refusals are commit.Refused), and an error after it (the
	// event) fails the batch.
	err := j.submitShared(ctx, func(ctx context.Context, tx *wtx) error {
		now := j.stamp()
		var result any
		if o.Result != nil {
			result = string(o.Result)
		}
		// As in Dispatch: the guarded update is the check, and the row is
		// read only to explain an update that matched nothing.
		var n int64
		if j.holds(o.Scope, o.EffectID, o.CallID) {
			res, err := tx.ExecContext(ctx, qFinish, o.State, nullable(o.ReceiptRef), result, nullable(o.ErrorCode),
				nullable(o.ReceiptErrorCode), now, o.Scope, o.EffectID, o.CallID, j.owner)
			if err != nil {
				return fmt.Errorf("finish effect: %w", err)
			}
			n, _ = res.RowsAffected()
		}
		if n != 1 {
			if _, err := j.heldRow(ctx, tx, o.Scope, o.EffectID, o.CallID, o.State); err != nil {
				return err
			}
			return commit.Refused(fmt.Errorf("finish effect %s/%s: %w", o.Scope, o.EffectID, ErrTransition))
		}
		return appendEvent(ctx, tx, o.Scope, o.EffectID, o.CallID, o.State, now, detail)
	})
	if err != nil {
		return err
	}
	j.release(o.Scope, o.EffectID, o.CallID)
	if dropped != nil {
		j.log.Warn().Str("scope", o.Scope).Str("effect_id", o.EffectID).Str("call_id", o.CallID).
			Str("state", o.State).Msg("effect outcome stored without its receipt and result")
	}
	return dropped
}

// describe renders the stored fields of an outcome for its audit event.
func describe(receiptRef, errorCode, receiptErrorCode, detail string) string {
	var b strings.Builder
	for _, kv := range [][2]string{{"receipt_ref", receiptRef}, {"error_code", errorCode},
		{"receipt_error_code", receiptErrorCode}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, " %s=%s", kv[0], kv[1])
		}
	}
	if detail != "" {
		b.WriteString("; " + detail)
	}
	return b.String()
}
