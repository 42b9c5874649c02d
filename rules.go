package touba

import (
	"encoding/json"
	"fmt"
)

// The journal rules every store applies alike (SPEC §5, §6): each backend
// reads and writes its rows its own way, the verdicts are these.

// PrepareRefusal decides whether the stored effect allows a new attempt of
// p (SPEC §5's table): nil when it does, else the refusal with its code.
// heldElsewhere says a prepared row is held by another handle or node.
func PrepareRefusal(stored Effect, p EffectPrepare, heldElsewhere bool) *RefusedError {
	refuse := func(code, format string, args ...any) *RefusedError {
		return &RefusedError{Effect: stored, Code: code, Reason: fmt.Sprintf(format, args...)}
	}
	if stored.Fingerprint != p.Fingerprint {
		return refuse(EEffectRequestConflict, "stored fingerprint %s differs from %s", stored.Fingerprint, p.Fingerprint)
	}
	switch stored.State {
	case EffectApplied:
		return refuse("", "already applied (receipt %q)", stored.ReceiptRef)
	case EffectDispatched:
		return refuse(EEffectInProgress, "dispatched by call %s", stored.CallID)
	case EffectPrepared:
		// One with no holder was released by recovery and may be retried.
		if heldElsewhere {
			return refuse(EEffectInProgress, "prepared by call %s of another journal handle", stored.CallID)
		}
	case EffectUnknown:
		// The stricter of the stored mode and the binding's mode now: an
		// unknown effect of an idempotency_key binding reloaded as none
		// must not be re-sent to a remote that no longer deduplicates.
		mode := stored.RetryMode
		if mode == RetryIdempotencyKey {
			mode = p.RetryMode
		}
		switch mode {
		case RetryIdempotencyKey:
		case RetryReconcile:
			return refuse(EEffectReconciliationRequired, "outcome unknown; retry mode reconcile needs an operator")
		default:
			return refuse(EEffectOutcomeUnknown, "outcome unknown; retry mode %s is not safe to repeat", mode)
		}
	}
	return nil
}

// Check validates an operator's verdict on the effect scope/effectID and
// returns what to store: the result (nil for not_applied; for applied,
// {"receipt_ref": REF} when none was given) and the audit event's detail.
func (r EffectResolution) Check(scope, effectID string) (result json.RawMessage, detail string, err error) {
	switch r.State {
	case EffectApplied:
		if r.ReceiptRef == "" {
			return nil, "", fmt.Errorf("resolve effect %s/%s: applied needs a receipt ref", scope, effectID)
		}
		result = r.Result
		if result == nil {
			result, _ = json.Marshal(map[string]string{"receipt_ref": r.ReceiptRef})
		} else if !json.Valid(result) {
			return nil, "", fmt.Errorf("resolve effect %s/%s: result is not valid JSON", scope, effectID)
		}
	case EffectNotApplied:
		if r.ReceiptRef != "" || r.Result != nil {
			return nil, "", fmt.Errorf("resolve effect %s/%s: not_applied takes no receipt or result", scope, effectID)
		}
	default:
		return nil, "", fmt.Errorf("resolve effect %s/%s: verdict %q is not applied or not_applied", scope, effectID, r.State)
	}
	detail = "operator resolve: " + r.State
	if r.ReceiptRef != "" {
		detail += " receipt_ref=" + r.ReceiptRef
	}
	if r.Operator != "" {
		detail += " by " + r.Operator
	}
	if r.Reason != "" {
		detail += "; reason: " + r.Reason
	}
	return result, detail, nil
}
