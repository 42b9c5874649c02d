package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/jsonx"
)

// Dispatch moves the effect held by callID from prepared to dispatched,
// just before the request leaves, under a live lease of its entry (which
// it renews for the whole --lease-ttl). A lost lease is LeaseLost: the
// request is not sent.
func (j *Journal) Dispatch(ctx context.Context, scope, effectID, callID string) error {
	return j.DispatchRequest(ctx, scope, effectID, callID, "")
}

// DispatchRequest is Dispatch that also records, in the dispatched event's
// detail, the request the call sends (touba.RequestDetail): never one that
// holds a secret value.
func (j *Journal) DispatchRequest(ctx context.Context, scope, effectID, callID, request string) error {
	note := touba.RequestDetail(request, j.holdsSecret(request))
	return j.submit(scope, func(ctx context.Context, tx *Tx) error {
		c, ok := j.holds(scope, effectID, callID)
		if ok && c.token != 0 {
			// Fence, update and event in one statement (journal_fused.go).
			fenced, attempts, err := j.dispatchFused(ctx, tx, scope, effectID, callID, c.token, note)
			if err != nil {
				return fmt.Errorf("dispatch effect: %w", err)
			} else if !fenced {
				return j.fenceRefused(ctx, tx, scope, c.token) // nothing written
			} else if attempts > 0 {
				return nil
			}
		} else if ok {
			if err := j.fence(ctx, tx, scope, c.token, true); err != nil {
				return err
			}
			if err := j.dispatchTx(ctx, tx, scope, effectID, callID, note); !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
		}
		r, err := j.heldRow(ctx, tx, scope, effectID, callID, touba.EffectDispatched)
		if err != nil {
			return err
		}
		return fmt.Errorf("dispatch effect %s/%s: %w: %s -> dispatched", scope, effectID, touba.ErrTransition, r.State)
	})
}

// dispatchTx moves the effect held by callID from prepared to dispatched
// with its event, under a fence already taken; pgx.ErrNoRows when it is
// not prepared by callID. note ends the event's detail.
func (j *Journal) dispatchTx(ctx context.Context, tx *Tx, scope, effectID, callID, note string) error {
	now := j.db.now()
	var attempts int
	err := tx.QueryRow(ctx, `UPDATE touba.effects SET state = 'dispatched', updated_at = $1
		WHERE scope = $2 AND effect_id = $3 AND state = 'prepared' AND call_id = $4 AND owner = $5
		RETURNING attempts`, now, scope, effectID, callID, j.owner).Scan(&attempts)
	if errors.Is(err, pgx.ErrNoRows) {
		return err
	} else if err != nil {
		return fmt.Errorf("dispatch effect: %w", err)
	}
	return appendEvent(ctx, tx, scope, effectID, callID, touba.EffectDispatched, now, fmt.Sprintf("dispatch attempt %d", attempts)+note)
}

// heldRow reads an effect callID must hold, to explain a guarded update
// that matched nothing (see sqlite/journal).
func (j *Journal) heldRow(ctx context.Context, tx *Tx, scope, effectID, callID, to string) (*row, error) {
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
		return nil, fmt.Errorf("effect %s/%s: no such effect", scope, effectID)
	}
	if r.State != touba.EffectPrepared && r.State != touba.EffectDispatched {
		return nil, fmt.Errorf("effect %s/%s: %w: %s -> %s", scope, effectID, touba.ErrTransition, r.State, to)
	}
	if _, ok := j.holds(scope, effectID, callID); !ok || r.CallID != callID || r.owner != j.owner {
		return nil, touba.Errorf(touba.EEffectInProgress, "effect %s/%s is held by call %s, not %s", scope, effectID, r.CallID, callID)
	}
	return r, nil
}

// Finish records the outcome of the call holding the effect. When the
// entry's lease was taken over meanwhile, nothing changes: the answer is
// kept as an effect.late_outcome audit event only, and Finish returns
// LeaseLost.
func (j *Journal) Finish(ctx context.Context, o touba.EffectOutcome) error {
	switch o.State {
	case touba.EffectApplied, touba.EffectNotApplied, touba.EffectUnknown:
	default:
		return fmt.Errorf("finish effect %s/%s: outcome %q is not applied, not_applied or unknown", o.Scope, o.EffectID, o.State)
	}
	var dropped error
	detail := "outcome " + o.State
	switch {
	case j.holdsSecret(o.ReceiptRef, o.ErrorCode, o.ReceiptErrorCode, o.Detail) || j.db.cfg.Secrets.ContainsJSON(o.Result):
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
	var lost, derr error
	single := func(ctx context.Context, tx *Tx) error {
		lost = nil
		now := j.db.now()
		c, ok := j.holds(o.Scope, o.EffectID, o.CallID)
		fenced := false
		if ok && c.token != 0 {
			// Fence, outcome and event in one statement (journal_fused.go); a
			// failed fence takes the path below, which explains it.
			var finished bool
			var err error
			if fenced, finished, err = j.finishFused(ctx, tx, o, c.token, now, detail); err != nil {
				return fmt.Errorf("finish effect: %w", err)
			} else if finished {
				return nil
			}
		}
		if ok && !fenced {
			if err := j.fence(ctx, tx, o.Scope, c.token, false); touba.ErrorCode(err) == touba.ELeaseLost {
				lost = err
				return appendEvent(ctx, tx, o.Scope, o.EffectID, o.CallID, "late_outcome", now,
					fmt.Sprintf("effect.late_outcome: node %s reported %s after losing its lease (token %d); not applied to the journal",
						j.db.cfg.NodeID, detail, c.token))
			} else if err != nil {
				return err
			}
			var result any
			if o.Result != nil {
				result = string(o.Result)
			}
			tag, err := tx.Exec(ctx, `UPDATE touba.effects SET state = $1, receipt_ref = $2, result = $3, error_code = $4,
				receipt_error_code = $5, updated_at = $6, owner = NULL
				WHERE scope = $7 AND effect_id = $8 AND state IN ('prepared', 'dispatched') AND call_id = $9 AND owner = $10`,
				o.State, nullable(o.ReceiptRef), result, nullable(o.ErrorCode), nullable(o.ReceiptErrorCode), now,
				o.Scope, o.EffectID, o.CallID, j.owner)
			if err != nil {
				return fmt.Errorf("finish effect: %w", err)
			}
			if tag.RowsAffected() == 1 {
				return appendEvent(ctx, tx, o.Scope, o.EffectID, o.CallID, o.State, now, detail)
			}
		}
		if _, err := j.heldRow(ctx, tx, o.Scope, o.EffectID, o.CallID, o.State); err != nil {
			return err
		}
		return fmt.Errorf("finish effect %s/%s: %w", o.Scope, o.EffectID, touba.ErrTransition)
	}
	err := j.submit(o.Scope, func(ctx context.Context, tx *Tx) error {
		lost, derr = nil, nil
		if c, ok := j.holds(o.Scope, o.EffectID, o.CallID); ok && c.token != 0 && tx.deferring(ctx, o.Scope) {
			// One statement with the batch's other outcomes (journal_batch.go);
			// one it could not write takes the path above.
			tx.d.jr = j
			tx.d.fin = append(tx.d.fin, finRow{o: o, token: c.token, detail: detail, done: func(ctx context.Context, ok bool) error {
				if ok {
					return nil
				}
				return tx.settle(single(ctx, tx), &derr)
			}})
			return nil
		}
		return single(ctx, tx)
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return err
	}
	j.release(o.Scope, o.EffectID, o.CallID)
	if lost != nil {
		return lost
	}
	return dropped
}

func describe(receiptRef, errorCode, receiptErrorCode, detail string) string {
	var b strings.Builder
	for _, kv := range [][2]string{{"receipt_ref", receiptRef}, {"error_code", errorCode}, {"receipt_error_code", receiptErrorCode}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, " %s=%s", kv[0], kv[1])
		}
	}
	if detail != "" {
		b.WriteString("; " + detail)
	}
	return b.String()
}

// Resolve records an operator's verdict on an unknown effect.
func (j *Journal) Resolve(ctx context.Context, scope, effectID string, r touba.EffectResolution) error {
	raw, detail, err := r.Check(scope, effectID)
	if err != nil {
		return err
	}
	if j.holdsSecret(r.ReceiptRef, r.Operator, r.Reason) || (raw != nil && j.db.cfg.Secrets.ContainsJSON(raw)) {
		return secretRefused("resolution")
	}
	var result any
	if raw != nil {
		result = string(raw)
	}
	return j.submit(scope, func(ctx context.Context, tx *Tx) error {
		cur, err := getRow(ctx, tx, scope, effectID)
		if err != nil {
			return fmt.Errorf("resolve effect: %w", err)
		} else if cur == nil {
			return fmt.Errorf("resolve effect %s/%s: no such effect", scope, effectID)
		}
		now := j.db.now()
		if j.orphaned(cur) {
			if err := markUnknown(ctx, tx, cur, now, touba.DetailOrphaned); err != nil {
				return err
			}
			cur.State = touba.EffectUnknown
		}
		if cur.State != touba.EffectUnknown {
			return touba.Errorf(touba.EEffectNotUnknown, "effect %s/%s is %s, not unknown", scope, effectID, cur.State)
		}
		if _, err := tx.Exec(ctx, `UPDATE touba.effects SET state = $1, receipt_ref = $2, result = $3, error_code = NULL,
			receipt_error_code = NULL, updated_at = $4, owner = NULL WHERE scope = $5 AND effect_id = $6 AND state = 'unknown'`,
			r.State, nullable(r.ReceiptRef), result, now, scope, effectID); err != nil {
			return fmt.Errorf("resolve effect: %w", err)
		}
		return appendEvent(ctx, tx, scope, effectID, cur.CallID, r.State, now, detail)
	})
}

// Abandon releases an effect whose call ended without its outcome
// journaled, and records a dispatched one unknown.
func (j *Journal) Abandon(ctx context.Context, scope, effectID, callID string) error {
	if _, ok := j.holds(scope, effectID, callID); !ok {
		return nil
	}
	j.release(scope, effectID, callID)
	return j.submit(scope, func(ctx context.Context, tx *Tx) error {
		r, err := getRow(ctx, tx, scope, effectID)
		if err != nil {
			return fmt.Errorf("abandon effect %s/%s: %w", scope, effectID, err)
		}
		if r == nil || r.CallID != callID || r.owner != j.owner {
			return nil
		}
		switch r.State {
		case touba.EffectDispatched:
			return markUnknown(ctx, tx, r, j.db.now(), touba.DetailOrphaned)
		case touba.EffectPrepared:
			_, err := tx.Exec(ctx, `UPDATE touba.effects SET owner = NULL
				WHERE scope = $1 AND effect_id = $2 AND state = 'prepared' AND call_id = $3`, scope, effectID, callID)
			return err
		}
		return nil
	})
}

func (j *Journal) orphaned(r *row) bool {
	if r == nil || r.State != touba.EffectDispatched || r.owner != j.owner {
		return false
	}
	j.claimMu.Lock()
	defer j.claimMu.Unlock()
	_, held := j.claims[claimKey(r.Scope, r.EffectID)]
	return !held
}

// Orphaned reports whether the effect is dispatched by this handle with
// no call of this process holding it.
func (j *Journal) Orphaned(ctx context.Context, scope, effectID string) bool {
	r, err := getRow(ctx, j.db.pool, scope, effectID)
	return err == nil && j.orphaned(r)
}
