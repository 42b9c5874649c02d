package dispatcher

import (
	"context"
	"errors"
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/internal/uuidv7"
	"github.com/touba/touba-trigger/protocol"
)

// Compensation is the outcome of an operator's compensation of an applied
// effect: a distinct journaled effect, CompensationID, whose operation is
// compensate. The original effect stays applied.
type Compensation = touba.Compensation

// Compensate calls, on an operator's command, the binding of the step that
// wrote original with operation compensate and the original step's input.
//
// The input is not stored anywhere; it is rebuilt the way the run built it:
// the step's input template resolved against the entry (its event) and the
// checkpointed outputs of the entry's steps. The rebuilt request must have
// the original's fingerprint, so a changed program, a changed checkpoint or
// a body purged by retention refuse the compensation
// (CompensationInputUnavailable) rather than send the handler something the
// original call never saw.
//
// The compensation goes through the journal like any external write
// (prepared, dispatched, then its outcome), under the effect id
// CompensationID(original) and the binding's retry mode; an unknown outcome
// is resolved with `effects resolve` like any other.
func Compensate(ctx context.Context, cfg *Config, j Journal, entry *touba.Delivery, steps map[string]touba.StepOutput,
	original *touba.Effect) (*Compensation, error) {
	if _, ok := touba.IsCompensation(original.EffectID); ok {
		return nil, touba.Errorf(touba.EEffectNotCompensable, "%s is itself a compensation", original.EffectID)
	}
	if original.State != touba.EffectApplied {
		return nil, touba.Errorf(touba.EEffectNotCompensable, "effect %s is %s; only an applied effect is compensated",
			original.EffectID, original.State)
	}
	t, idx, err := effectStep(cfg, entry, original)
	if err != nil {
		return nil, err
	}
	st := t.Steps[idx]
	b := cfg.Bindings[st.Tool]
	if b == nil || !b.ExternalWrite() {
		return nil, touba.Errorf(touba.ECompensationNotSupported, "tool %s of step %s is not an external_write binding", st.Tool, st.ID)
	}
	if !b.Compensation {
		return nil, touba.Errorf(touba.ECompensationNotSupported,
			`binding %s does not declare "compensation": {"supported": true}`, st.Tool)
	}
	input, err := rebuildInput(cfg, t, idx, entry, steps, original)
	if err != nil {
		return nil, err
	}
	fp, err := handler.Fingerprint(st.Tool, touba.OperationCompensate, input)
	if err != nil {
		return nil, fmt.Errorf("compensation fingerprint: %w", err)
	}

	compID := touba.CompensationID(original.EffectID)
	callID := uuidv7.New()
	out := &Compensation{Scope: original.Scope, EffectID: original.EffectID, CompensationID: compID, ToolRef: st.Tool, CallID: callID}
	eff, err := j.Prepare(ctx, touba.EffectPrepare{Scope: original.Scope, EffectID: compID, ToolRef: st.Tool,
		Operation: touba.OperationCompensate, Fingerprint: fp, RetryMode: b.Contract.RetryMode, CallID: callID})
	var refused *touba.RefusedError
	switch {
	case errors.As(err, &refused) && errors.Is(err, touba.ErrEffectApplied):
		out.State, out.Attempt, out.ReceiptRef, out.Output = touba.EffectApplied, refused.Effect.Attempts, refused.Effect.ReceiptRef, refused.Effect.Result
		out.CallID, out.Already = refused.Effect.CallID, true
		return out, nil
	case errors.Is(err, touba.ErrNotCompensable):
		return nil, touba.Errorf(touba.EEffectNotCompensable, "effect %s is not applied", original.EffectID)
	case err != nil:
		return nil, err
	}
	out.Attempt = eff.Attempts

	req := &handler.Request{Protocol: protocol.Name, Operation: protocol.Compensate, ToolRef: st.Tool, Input: input,
		Context: handler.Context{TriggerRef: entry.TriggerRef, EventID: entry.EventID, QueueID: entry.QueueID,
			RunID: "compensate-" + callID, CallID: callID, Attempt: eff.Attempts, Grants: b.Grants,
			Effect: &handler.Effect{Scope: original.Scope, EffectID: compID, Fingerprint: fp,
				RetryMode: b.Contract.RetryMode, Attempt: eff.Attempts}}}
	res := b.Runner.Call(ctx, req, func() error {
		return j.Dispatch(context.WithoutCancel(ctx), original.Scope, compID, callID)
	})
	// What the operator sees and the audit trail keeps passes the same
	// secret filter as a run's call: the error is withheld, a receipt or
	// output holding a secret is not shown (the journal refuses to store
	// it too).
	withholdSecretError(cfg.Secrets, res)
	leaked := cfg.Secrets.Contains(res.ReceiptRef) || cfg.Secrets.Contains(res.ReceiptErrorCode) ||
		cfg.Secrets.ContainsJSON(res.Output)
	outcome := res.Outcome
	if outcome == "" {
		outcome = touba.EffectNotApplied
		if res.Dispatched {
			outcome = touba.EffectUnknown
		}
	}
	o := touba.EffectOutcome{Scope: original.Scope, EffectID: compID, CallID: callID, State: outcome,
		ReceiptRef: res.ReceiptRef, ReceiptErrorCode: res.ReceiptErrorCode, Detail: "operator compensation of " + original.EffectID}
	if res.Err != nil {
		o.ErrorCode = res.Err.Code
		out.ErrorCode, out.Message = res.Err.Code, res.Err.Message
	}
	if outcome == touba.EffectApplied {
		o.Result = rawOrNull(res.Output)
		out.Output = o.Result
	}
	out.State, out.ReceiptRef = outcome, res.ReceiptRef
	if leaked {
		out.ReceiptRef, out.Output = "", nil
		out.ErrorCode, out.Message = touba.ESecretValueRefused, "the receipt or result held a secret value and was not stored"
	}
	if err := j.Finish(context.WithoutCancel(ctx), o); err != nil {
		if touba.ErrorCode(err) == touba.ESecretValueRefused {
			out.ReceiptRef, out.Output = "", nil
			out.ErrorCode, out.Message = touba.ESecretValueRefused, "the receipt or result held a secret value and was not stored"
			return out, nil
		}
		// The call ended: its claim must not outlive it (see effect).
		_ = j.Abandon(context.WithoutCancel(ctx), original.Scope, compID, callID)
		return out, fmt.Errorf("compensation %s answered %s but its outcome is not journaled (%v); it is unknown: "+
			"find out whether it happened, then touba-trigger effects resolve %s %s", compID, outcome, err, original.Scope, compID)
	}
	return out, nil
}
