package dispatcher

import (
	"context"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
)

// The dedupe window rule of the broker kinds (SPEC §2.2 "Dedupe windows"):
// a broker drops a message published again with the same id only within
// its window (JetStream's duplicate_window; Kafka's idempotent producer
// within one producer session only, which is no window across calls). An
// unknown publish of a retry_mode idempotency_key binding is sent again
// with the same id only while first dispatch + window − the publish's
// timeout has not passed: a re-send that lands in the stream later than the
// window after the first one would be a duplicate the broker keeps. Past
// it, the effect is parked EffectReconciliationRequired with the effect id
// to look for.

// eventsReader is the journal's audit trail (both backends have it).
type eventsReader interface {
	Events(ctx context.Context, scope, effectID string) ([]touba.EffectEvent, error)
}

// brokerReady is a broker runner that can tell whether it can publish now.
type brokerReady interface {
	Ready() bool
}

// windowVerdict is the verdict on sending the effect scope/effectID again
// through the broker binding b, whose runner reports its window: nil when
// the effect is not unknown or is certainly inside the window; a park past
// it (or while the window is not known); a retry when it is inside but the
// broker cannot be reached now, so the unknown is not spent on a publish
// that cannot leave.
func (d *Dispatcher) windowVerdict(ctx context.Context, b *Binding, w handler.DedupeWindower, scope, effectID string,
	log *callLog) *verdict {
	if b.Contract.RetryMode != touba.RetryIdempotencyKey || d.journal == nil {
		return nil
	}
	eff, err := d.journal.Get(ctx, scope, effectID)
	if err != nil || eff == nil || eff.State != touba.EffectUnknown {
		return nil // no record, or not unknown: the journal's own rules decide
	}
	first := d.firstDispatch(ctx, eff)
	window, known := w.DedupeWindow()
	timeout := b.Timeout
	if t, ok := w.(interface{ PublishTimeout() time.Duration }); ok {
		timeout = t.PublishTimeout()
	}
	deadline := first.Add(window - timeout)
	now := d.opts.Now()
	if !known || !now.Before(deadline) {
		why := "the broker's dedupe window has passed"
		switch {
		case !known:
			why = "the broker's dedupe window is not known (the " + w.Where() + " could not be read)"
		case window == 0:
			why = "the broker deduplicates only within one producer session"
		}
		log.get().Warn().Str("event", "effect.unknown").Dur("window", window).Time("first_dispatch", first).
			Msg("unknown publish outside the broker's dedupe window: parked, not published again")
		return stop(park, touba.EEffectReconciliationRequired,
			"outcome of %s is unknown and %s (first publish %s, window %s, timeout %s): look for the message whose id is %s in %s, "+
				"then touba-trigger effects resolve %s %s", effectID, why, first.UTC().Format(time.RFC3339Nano), window, timeout,
			effectID, w.Where(), scope, effectID)
	}
	if r, ok := w.(brokerReady); ok && !r.Ready() {
		return stop(retry, touba.EHandlerFailed, "the broker of %s is not connected; the unknown publish %s waits (inside its dedupe window until %s)",
			b.Ref, effectID, deadline.UTC().Format(time.RFC3339Nano))
	}
	log.get().Info().Time("deadline", deadline).Msg("unknown publish inside the broker's dedupe window: published again with the same id")
	return nil
}

// firstDispatch is when the effect's current unknown outcome may first have
// been published: the earliest dispatched event after its last not_applied
// one (an attempt certainly not stored ends the chain). Without the audit
// trail, the record's creation, which is earlier.
func (d *Dispatcher) firstDispatch(ctx context.Context, eff *touba.Effect) time.Time {
	first := eff.CreatedAt
	er, ok := d.journal.(eventsReader)
	if !ok {
		return first
	}
	events, err := er.Events(ctx, eff.Scope, eff.EffectID)
	if err != nil {
		return first
	}
	var at time.Time
	for _, ev := range events {
		switch ev.State {
		case touba.EffectNotApplied:
			at = time.Time{}
		case touba.EffectDispatched:
			if at.IsZero() {
				at = ev.At
			}
		}
	}
	if at.IsZero() {
		return first
	}
	return at
}

// brokerPark is the park of an unknown publish of a broker binding whose
// retry_mode never re-sends it (reconcile: EffectReconciliationRequired;
// none: EffectOutcomeUnknown), whatever the broker's window: it names the
// effect id to look for and where, as a park past the window does.
func brokerPark(code string, w handler.DedupeWindower, mode, scope, effectID, why string) *verdict {
	return stop(park, code, "outcome of %s is unknown (%s); not published again (retry_mode %s): look for the message whose id is %s in %s, "+
		"then touba-trigger effects resolve %s %s", effectID, why, mode, effectID, w.Where(), scope, effectID)
}
