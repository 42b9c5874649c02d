package postgres

import (
	"context"
	"errors"
	"fmt"

	touba "github.com/touba/touba-trigger"
)

// Prepare is the atomic reservation of an effect (SPEC §5), under the
// entry's lease when p.LeaseToken is set: see sqlite/journal.Prepare, whose
// rules it follows row for row.
func (j *Journal) Prepare(ctx context.Context, p touba.EffectPrepare) (*touba.Effect, error) {
	return j.prepare(ctx, p, false)
}

// PrepareDispatched is Prepare and then Dispatch in one operation, one
// commit, for in-process handlers (the dispatcher's choice: nothing starts
// and nothing is sent between them; docs/performance.md, "Prepared and
// dispatched in one commit"): a new effect is written dispatched with both
// audit events, under a live lease it extends, as Dispatch does.
func (j *Journal) PrepareDispatched(ctx context.Context, p touba.EffectPrepare) (*touba.Effect, error) {
	return j.prepare(ctx, p, true)
}

func (j *Journal) prepare(ctx context.Context, p touba.EffectPrepare, dispatch bool) (*touba.Effect, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if j.holdsSecret(p.Scope, p.EffectID, p.ToolRef, p.Operation, p.Fingerprint, p.CallID) {
		return nil, secretRefused("effect identity")
	}
	if !j.claim(p.Scope, p.EffectID, p.CallID, p.LeaseToken) {
		return nil, touba.Errorf(touba.EEffectInProgress, "effect %s/%s is in progress in this process", p.Scope, p.EffectID)
	}
	var out *touba.Effect
	var refused *touba.RefusedError
	var derr error // a deferred run's own error (tx_deferred.go)
	single := func(ctx context.Context, tx *Tx) error {
		out, refused = nil, nil
		if _, comp := touba.IsCompensation(p.EffectID); p.LeaseToken != 0 && !comp {
			// A new identity in one statement, fence included (journal_fused.go).
			now := j.db.now()
			fused, state := j.prepareFused, touba.EffectPrepared
			if dispatch {
				fused, state = j.prepareDispatchedFused, touba.EffectDispatched
			}
			fenced, inserted, err := fused(ctx, tx, p, now)
			if err != nil {
				return fmt.Errorf("prepare effect: %w", err)
			} else if !fenced {
				return j.fenceRefused(ctx, tx, p.Scope, p.LeaseToken) // nothing written
			} else if inserted {
				at, _ := touba.ParseTime(now)
				out = &touba.Effect{Scope: p.Scope, EffectID: p.EffectID, ToolRef: p.ToolRef, Operation: p.Operation,
					Fingerprint: p.Fingerprint, RetryMode: p.RetryMode, State: state, Attempts: 1,
					CallID: p.CallID, CreatedAt: at, UpdatedAt: at}
				return nil
			}
		} else if err := j.fence(ctx, tx, p.Scope, p.LeaseToken, true); err != nil {
			return err
		}
		e, err := j.prepareTx(ctx, tx, p)
		if err == nil && dispatch && e.State != touba.EffectDispatched {
			err = j.dispatchTx(ctx, tx, p.Scope, p.EffectID, p.CallID, "")
			e.State = touba.EffectDispatched
		}
		out, refused = e, nil
		if errors.As(err, &refused) {
			return nil
		}
		return err
	}
	err := j.submit(p.Scope, func(ctx context.Context, tx *Tx) error {
		out, refused, derr = nil, nil, nil
		if _, comp := touba.IsCompensation(p.EffectID); dispatch && p.LeaseToken != 0 && !comp && tx.deferring(ctx, p.Scope) {
			// One statement with the batch's other new effects (journal_batch.go);
			// one it could not write whole takes the path above.
			tx.d.jr = j
			tx.d.pd = append(tx.d.pd, pdRow{p: p, done: func(ctx context.Context, now string, ok bool) error {
				if !ok {
					return tx.settle(single(ctx, tx), &derr)
				}
				at, _ := touba.ParseTime(now)
				out = &touba.Effect{Scope: p.Scope, EffectID: p.EffectID, ToolRef: p.ToolRef, Operation: p.Operation,
					Fingerprint: p.Fingerprint, RetryMode: p.RetryMode, State: touba.EffectDispatched, Attempts: 1,
					CallID: p.CallID, CreatedAt: at, UpdatedAt: at}
				return nil
			}})
			return nil
		}
		return single(ctx, tx)
	})
	if err == nil {
		err = derr
	}
	if err == nil && refused != nil {
		err = refused
	}
	if err != nil {
		j.release(p.Scope, p.EffectID, p.CallID)
		var re *touba.RefusedError
		if errors.As(err, &re) {
			return &re.Effect, err
		}
		return nil, err
	}
	return out, nil
}

func (j *Journal) prepareTx(ctx context.Context, tx *Tx, p touba.EffectPrepare) (*touba.Effect, error) {
	now := j.db.now()
	if orig, ok := touba.IsCompensation(p.EffectID); ok {
		o, err := getRow(ctx, tx, p.Scope, orig)
		if err != nil {
			return nil, fmt.Errorf("prepare compensation: %w", err)
		} else if o == nil || o.State != touba.EffectApplied {
			return nil, fmt.Errorf("prepare compensation %s/%s: %w", p.Scope, p.EffectID, touba.ErrNotCompensable)
		}
	}
	r, err := getRow(ctx, tx, p.Scope, p.EffectID)
	if err != nil {
		return nil, fmt.Errorf("prepare effect: %w", err)
	}
	if r == nil {
		tag, err := tx.Exec(ctx, `INSERT INTO touba.effects (scope, effect_id, tool_ref, operation, fingerprint, retry_mode, state,
			attempts, call_id, created_at, updated_at, owner, lease_token, kept, born, born_call)
			VALUES ($1, $2, $3, $4, $5, $6, 'prepared', 1, $7, $8, $8, $9, $10, EXISTS (SELECT 1 FROM touba.entries k WHERE k.queue_id = $1 AND k.kept),
				'`+bornP+`', $7) ON CONFLICT DO NOTHING`,
			p.Scope, p.EffectID, p.ToolRef, p.Operation, p.Fingerprint, p.RetryMode, p.CallID, now, j.owner, p.LeaseToken)
		if err != nil {
			return nil, fmt.Errorf("prepare effect: %w", err)
		}
		if tag.RowsAffected() != 1 {
			return nil, touba.Errorf(touba.EEffectInProgress, "effect %s/%s was created by another call", p.Scope, p.EffectID)
		}
		at, _ := touba.ParseTime(now)
		e := &touba.Effect{Scope: p.Scope, EffectID: p.EffectID, ToolRef: p.ToolRef, Operation: p.Operation,
			Fingerprint: p.Fingerprint, RetryMode: p.RetryMode, State: touba.EffectPrepared, Attempts: 1,
			CallID: p.CallID, CreatedAt: at, UpdatedAt: at}
		return e, nil // its prepared event is the row's (born)
	}
	if r.State == touba.EffectDispatched && r.owner == j.owner && r.CallID != p.CallID {
		if err := markUnknown(ctx, tx, r, now, touba.DetailOrphaned); err != nil {
			return nil, err
		}
		r.State, r.owner = touba.EffectUnknown, ""
	}
	if refused := j.refusePrepare(r, p); refused != nil {
		return nil, refused
	}
	tag, err := tx.Exec(ctx, `UPDATE touba.effects SET state = 'prepared', attempts = attempts + 1, call_id = $1,
		tool_ref = $2, retry_mode = $3, receipt_ref = NULL, result = NULL, error_code = NULL,
		receipt_error_code = NULL, updated_at = $4, owner = $5, lease_token = $6
		WHERE scope = $7 AND effect_id = $8 AND state = $9 AND attempts = $10`,
		p.CallID, p.ToolRef, p.RetryMode, now, j.owner, p.LeaseToken, p.Scope, p.EffectID, r.State, r.Attempts)
	if err != nil {
		return nil, fmt.Errorf("prepare effect: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return nil, touba.Errorf(touba.EEffectInProgress, "effect %s/%s changed under another call", p.Scope, p.EffectID)
	}
	e := r.Effect
	e.State, e.Attempts, e.CallID, e.ToolRef, e.RetryMode = touba.EffectPrepared, r.Attempts+1, p.CallID, p.ToolRef, p.RetryMode
	e.ReceiptRef, e.Result, e.ErrorCode, e.ReceiptErrorCode = "", nil, "", ""
	e.UpdatedAt, _ = touba.ParseTime(now)
	return &e, appendEvent(ctx, tx, p.Scope, p.EffectID, p.CallID, touba.EffectPrepared, now,
		fmt.Sprintf("prepare attempt %d (was %s)", e.Attempts, r.State))
}

// refusePrepare decides whether a stored row allows a new attempt (SPEC §5).
func (j *Journal) refusePrepare(r *row, p touba.EffectPrepare) *touba.RefusedError {
	return touba.PrepareRefusal(r.Effect, p, r.owner != "" && r.owner != j.owner)
}
