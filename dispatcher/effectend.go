package dispatcher

import (
	"context"
	"encoding/json"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/internal/crashpoint"
)

// effectEnd journals the outcome of a call that was prepared, and turns it
// into the step's output or verdict (SPEC §5's table).
func (d *Dispatcher) effectEnd(ctx context.Context, b *Binding, scope, effectID, callID string, res *handler.Result,
	log *callLog) (json.RawMessage, *verdict) {
	outcome := res.Outcome
	if outcome == "" {
		outcome = touba.EffectNotApplied
		if res.Dispatched {
			outcome = touba.EffectUnknown
		}
	}
	o := touba.EffectOutcome{Scope: scope, EffectID: effectID, CallID: callID, State: outcome, ReceiptRef: res.ReceiptRef,
		ReceiptErrorCode: res.ReceiptErrorCode, Detail: res.Detail}
	if res.Err != nil {
		o.ErrorCode = res.Err.Code
	}
	if outcome == touba.EffectApplied {
		o.Result = rawOrNull(res.Output)
	}
	if err := d.finish(ctx, o, log); touba.ErrorCode(err) == touba.ESecretValueRefused {
		// The outcome state is journaled; what held a secret was dropped.
		// An applied result that cannot be stored cannot be restored
		// either, so the run stops here for an operator.
		log.get().Error().Str("outcome", outcome).Msg("effect receipt or result held a secret value; not stored")
		if outcome == touba.EffectApplied {
			return nil, stop(park, touba.ESecretValueRefused, "result of %s held a secret value and was not stored", effectID)
		}
	} else if touba.ErrorCode(err) == touba.ELeaseLost {
		// Another node took the entry over while the call ran: the journal
		// kept this answer as effect.late_outcome only, and the new
		// holder's view stands. Nothing more is done here.
		log.get().Warn().Str("event", "effect.late_outcome").Str("outcome", outcome).Msg("lease lost during the call; outcome kept as an audit event only")
		return nil, stop(later, touba.ELeaseLost, "%s", touba.ErrorMessage(err))
	} else if err != nil {
		// The call happened and its outcome is not on disk: only an
		// operator can say what it did. The call has ended, so its claim
		// is released and the record turned unknown (now, or by the next
		// Prepare or Resolve of it if the journal still cannot write):
		// a replay then parks once on it instead of looping on
		// EffectInProgress, and `effects resolve` accepts it.
		log.get().Error().Err(err).Str("outcome", outcome).Msg("cannot record the effect outcome")
		if aerr := d.journal.Abandon(context.WithoutCancel(ctx), scope, effectID, callID); aerr != nil {
			log.get().Error().Err(aerr).Msg("cannot record the effect unknown either; it is turned unknown at its next use")
		}
		return nil, stop(park, touba.EEffectOutcomeUnknown, "outcome %s of %s could not be journaled (%v); it is unknown: "+
			"find out whether it happened, then touba-trigger effects resolve %s %s", outcome, effectID, err, scope, effectID)
	}
	crashpoint.Hit(CrashAfterOutcome)

	switch outcome {
	case touba.EffectApplied:
		if !res.OK && res.Err != nil {
			// Applied, says the receipt, yet the handler answered an error:
			// the journal keeps the truth (applied), and the run stops for
			// an operator rather than feed later steps as if all went well.
			return nil, stop(park, res.Err.Code, "effect %s applied with an error answer: %s", effectID, res.Err.Message)
		}
		return rawOrNull(res.Output), nil
	case touba.EffectNotApplied:
		return nil, d.notSent(b, res, log, "effect not applied")
	}
	code, msg := touba.EHandlerFailed, "outcome unknown"
	if res.Err != nil {
		code, msg = res.Err.Code, res.Err.Message
	}
	log.get().Warn().Str("event", "effect.unknown").Str("code", code).Str("retry_mode", b.Contract.RetryMode).
		Str("reason", msg).Msg("effect outcome unknown")
	switch b.Contract.RetryMode {
	case touba.RetryIdempotencyKey:
		if w, ok := b.Runner.(handler.DedupeWindower); ok {
			if v := d.windowVerdict(ctx, b, w, scope, effectID, log); v != nil && v.action == park {
				return nil, v
			}
		}
		return nil, &verdict{action: retry, code: code, message: msg}
	case touba.RetryReconcile:
		if w, ok := b.Runner.(handler.DedupeWindower); ok {
			return nil, brokerPark(touba.EEffectReconciliationRequired, w, b.Contract.RetryMode, scope, effectID, code+": "+msg)
		}
		return nil, stop(park, touba.EEffectReconciliationRequired, "outcome of %s is unknown (%s); reconcile it", effectID, code)
	default:
		if w, ok := b.Runner.(handler.DedupeWindower); ok {
			return nil, brokerPark(touba.EEffectOutcomeUnknown, w, b.Contract.RetryMode, scope, effectID, code+": "+msg)
		}
		return nil, stop(park, touba.EEffectOutcomeUnknown, "outcome of %s is unknown (%s); not safe to replay", effectID, code)
	}
}
