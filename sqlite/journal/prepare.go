package journal

import (
	"context"
	"errors"
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/commit"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// Prepare names the effect a call is about to attempt.
type Prepare = touba.EffectPrepare

// ErrApplied is matched (errors.Is) by the error of a Prepare that found the
// effect applied: no new attempt; the stored result is what the run uses.
var ErrApplied = touba.ErrEffectApplied

// ErrNotCompensable is matched (errors.Is) by the error of a compensation
// whose original effect is missing or not applied.
var ErrNotCompensable = touba.ErrNotCompensable

// RefusedError is the error of a Prepare that found a stored effect allowing
// no new attempt now. Effect is the stored row, so the dispatcher can use an
// applied result or park the entry. Code is the public code:
// EffectInProgress, EffectRequestConflict, EffectReconciliationRequired,
// EffectOutcomeUnknown, or "" for an applied effect (match ErrApplied).
type RefusedError = touba.RefusedError

// Prepare is the atomic reservation of an effect, durable before it
// returns. It creates the row (prepared, attempt 1), or moves an existing
// row that allows a new attempt (prepared, not_applied, or unknown with
// retry mode idempotency_key) to prepared with one more attempt, and returns
// the row as stored. The caller's CallID holds the effect until Finish.
//
// It fails with code EffectInProgress when another call holds the identity
// (in this process, or another handle on the file), and with a
// *RefusedError when the stored row refuses a new attempt: another
// fingerprint, applied, or unknown without idempotency key. The stored row
// is returned with a *RefusedError too. A compensation (operation
// compensate, CompensationID) requires its original effect to be applied.
func (j *Journal) Prepare(ctx context.Context, p Prepare) (*Effect, error) {
	return j.prepare(ctx, p, false)
}

// PrepareDispatched is Prepare and then Dispatch in one operation, so one
// commit: for an in-process handler (accounting_stub), where no process
// starts and nothing can fail between the two facts, so that prepared
// alone would tell recovery nothing that dispatched does not (SPEC §5, and
// docs/performance.md for why it is sound). The audit trail holds both
// events, as with two commits. The effect is returned dispatched.
func (j *Journal) PrepareDispatched(ctx context.Context, p Prepare) (*Effect, error) {
	return j.prepare(ctx, p, true)
}

func (j *Journal) prepare(ctx context.Context, p Prepare, dispatch bool) (*Effect, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if j.holdsSecret(p.Scope, p.EffectID, p.ToolRef, p.Operation, p.Fingerprint, p.CallID) {
		return nil, secretRefused("effect identity")
	}
	if !j.claim(p.Scope, p.EffectID, p.CallID) {
		return nil, touba.Errorf(touba.EEffectInProgress, "effect %s/%s is in progress in this process", p.Scope, p.EffectID)
	}
	var out *Effect
	var refused *RefusedError
	err := j.submitShared(ctx, func(ctx context.Context, tx *wtx) error {
		out, refused = nil, nil
		if _, comp := IsCompensation(p.EffectID); !comp {
			// The common case, a new effect: the insert is the reservation,
			// and nothing refuses it after. No savepoint: a statement that
			// fails here fails the batch, as one of the transaction's.
			e, err := j.insertTx(ctx, tx, p, dispatch)
			if err != nil || e != nil {
				out = e
				return err
			}
		}
		// The effect exists (or it is a compensation, whose original is
		// read first). Deciding may write (an orphaned dispatched row turned
		// unknown), then refuse, which keeps that write, or fail, which must
		// undo it: a savepoint of its own.
		opErr, fatal := sqlitex.Savepoint(ctx, tx, func() error {
			e, err := j.prepareTx(ctx, tx, p, dispatch)
			out, refused = e, nil
			if err == nil && dispatch && e.State != touba.EffectDispatched {
				err = j.dispatchTx(ctx, tx, p.Scope, p.EffectID, p.CallID, "")
				e.State = touba.EffectDispatched
			}
			if errors.As(err, &refused) {
				return nil
			}
			return err
		})
		if fatal != nil {
			return fatal
		}
		return commit.Refused(opErr)
	})
	if err == nil && refused != nil {
		err = refused
	}
	if err != nil {
		j.release(p.Scope, p.EffectID, p.CallID)
		var re *RefusedError
		if errors.As(err, &re) {
			return &re.Effect, err
		}
		return nil, err
	}
	return out, nil
}

const (
	// INSERT ... ON CONFLICT DO NOTHING is the compare-and-swap of a new
	// row: of two handles racing on one file, only one inserts.
	qInsertEffect = `INSERT INTO effects (scope, effect_id, tool_ref, operation, fingerprint,
		retry_mode, state, attempts, call_id, created_at, updated_at, owner)
		VALUES (?, ?, ?, ?, ?, ?, 'prepared', 1, ?, ?, ?, ?) ON CONFLICT DO NOTHING`
	// The same, for PrepareDispatched: a new row goes straight to
	// dispatched (both events are appended), one statement fewer.
	qInsertEffectDispatched = `INSERT INTO effects (scope, effect_id, tool_ref, operation, fingerprint,
		retry_mode, state, attempts, call_id, created_at, updated_at, owner)
		VALUES (?, ?, ?, ?, ?, ?, 'dispatched', 1, ?, ?, ?, ?) ON CONFLICT DO NOTHING`
	// The compare-and-swap on (state, attempts): the row must still be what
	// was read, so two racers that read the same row cannot both move it.
	qPrepareAgain = `UPDATE effects SET state = 'prepared', attempts = attempts + 1, call_id = ?,
		tool_ref = ?, retry_mode = ?, receipt_ref = NULL, result = NULL, error_code = NULL,
		receipt_error_code = NULL, updated_at = ?, owner = ?
		WHERE scope = ? AND effect_id = ? AND state = ? AND attempts = ?`
)

// prepareTx prepares p; with dispatch, a new row is created dispatched
// (the returned effect says which state it is in).
func (j *Journal) prepareTx(ctx context.Context, tx *wtx, p Prepare, dispatch bool) (*Effect, error) {
	now := j.stamp()
	if orig, ok := IsCompensation(p.EffectID); ok {
		o, err := getRow(ctx, tx, p.Scope, orig)
		if err != nil {
			return nil, fmt.Errorf("prepare compensation: %w", err)
		} else if o == nil || o.State != touba.EffectApplied {
			return nil, fmt.Errorf("prepare compensation %s/%s: %w", p.Scope, p.EffectID, ErrNotCompensable)
		}
	}
	r, err := getRow(ctx, tx, p.Scope, p.EffectID)
	if err != nil {
		return nil, fmt.Errorf("prepare effect: %w", err)
	}
	if r == nil {
		e, err := j.insertTx(ctx, tx, p, dispatch)
		if err == nil && e == nil {
			err = touba.Errorf(touba.EEffectInProgress, "effect %s/%s was created by another call", p.Scope, p.EffectID)
		}
		return e, err
	}
	if r.State == touba.EffectDispatched && r.owner == j.owner && r.CallID != p.CallID {
		// Dispatched by this handle, and p.CallID now holds the claim: the
		// call that dispatched it has ended without its outcome on disk.
		// It is unknown, and refused or retried as unknown below.
		if err := j.markUnknown(ctx, tx, r, now, OrphanDetail); err != nil {
			return nil, err
		}
		r.State, r.owner = touba.EffectUnknown, ""
	}
	if refused := j.refusePrepare(r, p); refused != nil {
		return nil, refused
	}
	res, err := tx.ExecContext(ctx, qPrepareAgain, p.CallID, p.ToolRef, p.RetryMode, now, j.owner, p.Scope, p.EffectID, r.State, r.Attempts)
	if err != nil {
		return nil, fmt.Errorf("prepare effect: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return nil, touba.Errorf(touba.EEffectInProgress, "effect %s/%s changed under another call", p.Scope, p.EffectID)
	}
	e := r.Effect
	e.State, e.Attempts, e.CallID, e.ToolRef, e.RetryMode = touba.EffectPrepared, r.Attempts+1, p.CallID, p.ToolRef, p.RetryMode
	e.ReceiptRef, e.Result, e.ErrorCode, e.ReceiptErrorCode = "", nil, "", ""
	e.UpdatedAt, _ = touba.ParseTime(now)
	return &e, appendEvent(ctx, tx, p.Scope, p.EffectID, p.CallID, touba.EffectPrepared, now,
		fmt.Sprintf("prepare attempt %d (was %s)", e.Attempts, r.State))
}

// insertTx creates p's row, prepared (attempt 1), or with dispatch straight
// as dispatched, with its events; nil and no error when the row exists.
func (j *Journal) insertTx(ctx context.Context, tx *wtx, p Prepare, dispatch bool) (*Effect, error) {
	now := j.stamp()
	insert := qInsertEffect
	if dispatch {
		insert = qInsertEffectDispatched
	}
	res, err := tx.ExecContext(ctx, insert, p.Scope, p.EffectID, p.ToolRef, p.Operation, p.Fingerprint, p.RetryMode, p.CallID, now, now, j.owner)
	if err != nil {
		return nil, fmt.Errorf("prepare effect: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return nil, nil
	}
	at, _ := touba.ParseTime(now)
	e := &Effect{Scope: p.Scope, EffectID: p.EffectID, ToolRef: p.ToolRef, Operation: p.Operation,
		Fingerprint: p.Fingerprint, RetryMode: p.RetryMode, State: touba.EffectPrepared, Attempts: 1,
		CallID: p.CallID, CreatedAt: at, UpdatedAt: at}
	if !dispatch {
		return e, appendEvent(ctx, tx, p.Scope, p.EffectID, p.CallID, touba.EffectPrepared, now, "prepare attempt 1")
	}
	e.State = touba.EffectDispatched
	if _, err := tx.ExecContext(ctx, qInsertEventPair,
		p.Scope, p.EffectID, p.CallID, touba.EffectPrepared, now, "prepare attempt 1",
		p.Scope, p.EffectID, p.CallID, touba.EffectDispatched, now, "dispatch attempt 1"); err != nil {
		return nil, fmt.Errorf("append effect events: %w", err)
	}
	return e, nil
}

// refusePrepare decides whether a stored row allows a new attempt (SPEC §5).
func (j *Journal) refusePrepare(r *row, p Prepare) *RefusedError {
	return touba.PrepareRefusal(r.Effect, p, r.owner != "" && r.owner != j.owner)
}
