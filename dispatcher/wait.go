package dispatcher

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/trigger"
)

// Sleep and wait_for steps (SPEC §2.3). Neither holds the worker while it
// waits: BeginWait stores the wait and moves the entry to waiting, the run
// stops there, and the entry runs again once the wait ends (Wake, or the
// matching delivery's Enqueue). That run reaches the step again and
// BeginWait, finding the wait ended, says how: the step's output, which
// is checkpointed like any other.

// durable runs a sleep or wait_for step of t.
func (d *Dispatcher) durable(ctx context.Context, cfg *Config, t *trigger.Trigger, e *touba.Delivery, st trigger.Step,
	rc *runContext, log zerolog.Logger) (json.RawMessage, *verdict) {
	if d.opts.Waits == nil {
		return nil, stop(fail, touba.EINTERNAL, "step %s is a %s and the store keeps no waits", st.ID, st.Kind())
	}
	now := d.opts.Now()
	w := touba.Wait{QueueID: e.QueueID, StepID: st.ID}
	if s := st.Sleep; s != nil {
		end, err := sleepEnd(cfg, rc, s, now)
		if err != nil {
			return nil, fromError(touba.Errorf(touba.EStepInputUnresolved, "sleep of step %s: %s", st.ID, touba.ErrorMessage(err)))
		}
		if !end.After(now) {
			return wokeAt(now), nil
		}
		w.Kind, w.WakeAt = touba.WaitSleep, &end
	} else {
		wf := st.WaitFor
		v, err := matchOf(cfg, rc, wf)
		if err != nil {
			code := touba.EStepInputUnresolved
			if touba.ErrorCode(err) == touba.EExpressionFailed {
				code = touba.EExpressionFailed
			}
			return nil, fromError(touba.Errorf(code, "match of step %s: %s", st.ID, touba.ErrorMessage(err)))
		}
		// An oversized value fails the step, not the store's batch or the
		// lease (issue 43); no delivery could offer it anyway.
		if err := touba.CheckKeyValue("wait_for.match of step "+st.ID, v); err != nil {
			return nil, stop(fail, touba.EKeyTooLong, "%s", touba.ErrorMessage(err))
		}
		w.Kind, w.Key, w.Value = touba.WaitEvent, wf.Key(t.Ref, st.ID), v
		if wf.TimeoutMS > 0 {
			at := now.Add(time.Duration(wf.TimeoutMS) * time.Millisecond)
			w.WakeAt = &at
		}
	}
	got, err := d.opts.Waits.BeginWait(ctx, e.LeaseToken, w)
	if touba.ErrorCode(err) == touba.ELeaseLost {
		return nil, stop(later, touba.ELeaseLost, "wait of step %s: %s", st.ID, touba.ErrorMessage(err))
	} else if err != nil {
		return nil, &verdict{action: later, code: touba.EINTERNAL, message: "wait of step " + st.ID + ": " + err.Error()}
	}
	// Committed: the wait is stored open, or ended at once by an offer
	// accepted earlier; the run has not gone on from it.
	crashpoint.Hit(CrashAfterWaitBegun)
	if got.Kind != w.Kind {
		// The step's wait began under a program where it was the other
		// kind: what ended it does not answer this step.
		return nil, stop(park, touba.EProgramChanged, "step %s began as a %s wait and is a %s now", st.ID, got.Kind, st.Kind())
	}
	switch got.State {
	case touba.WaitOpen:
		d.strandedSince(cfg)
		if got.WakeAt != nil {
			d.wakeAt(*got.WakeAt)
		}
		return nil, &verdict{action: waiting, message: "waiting at step " + st.ID}
	case touba.WaitWoke:
		return wokeAt(resolvedAt(got, now)), nil
	case touba.WaitMatched:
		return d.matched(ctx, e, st, got, log)
	case touba.WaitTimedOut:
		if st.Sleep != nil {
			return wokeAt(resolvedAt(got, now)), nil
		}
		if st.WaitFor.OnTimeout == trigger.OnTimeoutContinue {
			return json.RawMessage("null"), nil
		}
		return nil, stop(fail, touba.EWaitTimedOut, "step %s: no delivery of %s matched within %d ms",
			st.ID, st.WaitFor.Trigger, st.WaitFor.TimeoutMS)
	case touba.WaitCancelled:
		return nil, &verdict{action: ended, code: touba.ERunCancelled, message: "cancelled by a cancel_on match at step " + st.ID}
	}
	return nil, &verdict{action: later, code: touba.EINTERNAL, message: "wait of step " + st.ID + " is in unknown state " + got.State}
}

// sleepEnd is when a sleep step that begins at now ends.
func sleepEnd(cfg *Config, rc *runContext, s *trigger.Sleep, now time.Time) (time.Time, error) {
	if len(s.Until) == 0 {
		return now.Add(time.Duration(s.MS) * time.Millisecond), nil
	}
	raw, err := rc.resolve(cfg, s.Until, nil)
	if err != nil {
		return time.Time{}, err
	}
	var str string
	if err := json.Unmarshal(raw, &str); err != nil {
		return time.Time{}, touba.Errorf(touba.EStepInputUnresolved, "until is %s, not an RFC 3339 time", raw)
	}
	at, err := time.Parse(time.RFC3339Nano, str)
	if err != nil {
		return time.Time{}, touba.Errorf(touba.EStepInputUnresolved, "until %q is not an RFC 3339 time", str)
	}
	return at, nil
}

// matchOf is the value a wait_for awaits: what match resolves to in the
// run context, rendered as intake renders the awaited deliveries' values
// (trigger.CanonicalValue), so equal values are equal strings. A match
// that resolves to null is refused: null never matches.
//
// A {"cel": EXPR} match is the expression's value (SPEC §2.4).
func matchOf(cfg *Config, rc *runContext, wf *trigger.WaitFor) (string, error) {
	var raw []byte
	var err error
	if wf.MatchCEL != nil {
		raw, err = rc.eval(wf.MatchCEL)
	} else {
		raw, err = rc.resolve(cfg, wf.Match, nil)
	}
	if err != nil {
		return "", err
	}
	v, ok := trigger.CanonicalValue(json.RawMessage(raw))
	if !ok {
		return "", touba.Errorf(touba.EStepInputUnresolved, "it resolves to %s, which no delivery matches", raw)
	}
	return v, nil
}

// matched is the output of a wait_for a delivery matched: that delivery's
// queue id, event id, headers and body (parsed, or the raw string when not
// JSON). A delivery whose body and headers are gone (purged by
// --retention, or the entry forgotten, before the waiting entry read it)
// fails the step WaitMatchPurged: its output would be an empty delivery
// that the next steps take for the real one (issue 42). A body that was
// empty when accepted is stored empty, not absent, and is output as "".
func (d *Dispatcher) matched(ctx context.Context, e *touba.Delivery, st trigger.Step, w touba.Wait, log zerolog.Logger) (json.RawMessage, *verdict) {
	g, ok := d.opts.Waits.(entryGetter)
	if !ok {
		g, ok = d.queue.(entryGetter)
	}
	if !ok {
		return nil, stop(fail, touba.EINTERNAL, "step %s: the store cannot read the matched delivery %s", st.ID, w.MatchedQueueID)
	}
	m, err := g.Get(ctx, w.MatchedQueueID)
	if err != nil {
		return nil, &verdict{action: later, code: touba.EINTERNAL, message: "matched delivery of step " + st.ID + ": " + err.Error()}
	}
	if gone := m == nil; gone || bodyPurged(m) {
		what := "its body and headers were purged by --retention"
		if gone {
			what = "it is no longer in the queue"
		}
		log.Warn().Str("step", st.ID).Str("matched_queue_id", w.MatchedQueueID).Bool("gone", gone).
			Msg("matched delivery unreadable; the step fails")
		return nil, stop(fail, touba.EWaitMatchPurged, "step %s matched delivery %s, but %s before this entry read it",
			st.ID, w.MatchedQueueID, what)
	}
	out := map[string]any{"queue_id": w.MatchedQueueID, "event_id": m.EventID, "headers": m.Headers, "body": parseBody(m.Body)}
	b, err := canonical(out)
	if err != nil {
		return nil, stop(fail, touba.EHandlerProtocolError, "matched delivery of step %s: %v", st.ID, err)
	}
	d.auditMatch(ctx, e, st, w, log)
	return b, nil
}

// bodyPurged says whether retention dropped m's body: the stores keep a
// finished entry's body absent (nil) once purged, and empty (not nil) when
// it was accepted empty.
func bodyPurged(m *touba.Delivery) bool {
	return m.Body == nil && (m.Status == touba.StatusDone || m.Status == touba.StatusMerged)
}

// auditMatch records the match in the audit trail of both entries, which
// outlives the wait row (a resume or replay removes it). It is written
// before the step's checkpoint, so a crash between them may record the
// match twice, never not at all.
func (d *Dispatcher) auditMatch(ctx context.Context, e *touba.Delivery, st trigger.Step, w touba.Wait, log zerolog.Logger) {
	a, ok := d.state.(touba.AuditLog)
	if !ok {
		return
	}
	at := resolvedAt(w, d.opts.Now())
	detail := fmt.Sprintf("wait %s of %s matched delivery %s", st.ID, e.QueueID, w.MatchedQueueID)
	evs := []touba.OperatorEvent{
		{At: at, Action: "wait.matched", QueueID: e.QueueID, Target: st.ID, Outcome: w.MatchedQueueID, Operator: "dispatcher", Detail: detail},
		{At: at, Action: "wait.matched", QueueID: w.MatchedQueueID, Target: e.QueueID + ":" + st.ID, Outcome: w.MatchedQueueID, Operator: "dispatcher", Detail: detail},
	}
	if err := a.RecordOperators(ctx, evs); err != nil {
		log.Warn().Err(err).Str("step", st.ID).Msg("cannot record the match in the audit trail")
	}
}

// entryGetter reads one queue entry (both queue stores have it).
type entryGetter interface {
	Get(ctx context.Context, queueID string) (*touba.Delivery, error)
}

// cancelRequested asks, before step stepID of a trigger with cancel_on,
// whether a match arrived while the entry ran.
func (d *Dispatcher) cancelRequested(ctx context.Context, e *touba.Delivery, stepID string) *verdict {
	if d.opts.Waits == nil {
		return nil
	}
	yes, err := d.opts.Waits.CancelRequested(ctx, e.QueueID)
	if err != nil {
		return &verdict{action: later, code: touba.EINTERNAL, message: "cancel check: " + err.Error()}
	}
	if !yes {
		return nil
	}
	return &verdict{action: cancel, code: touba.ERunCancelled,
		message: "cancelled by a cancel_on match; step " + stepID + " and the later ones did not start"}
}

func resolvedAt(w touba.Wait, now time.Time) time.Time {
	if w.ResolvedAt != nil {
		return *w.ResolvedAt
	}
	return now
}

func wokeAt(t time.Time) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"woke_at": touba.FormatTime(t)})
	return b
}
