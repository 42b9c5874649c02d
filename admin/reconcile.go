package admin

import (
	"context"
	"encoding/json"
	"fmt"

	touba "github.com/touba/touba-trigger"
)

// Resolve records an operator's verdict on an unknown effect (SPEC §6) and
// puts its parked entry back to pending, unless another effect of the
// entry still awaits a verdict. With applied, the run goes on from the next
// step and later $refs read the stored result; with not_applied, the next
// attempt calls the handler again with the same effect id.
func (s *Service) Resolve(ctx context.Context, r ResolveRequest) (*ResolveResult, error) {
	if s.Journal == nil {
		return nil, touba.Errorf(touba.EEffectJournalRequired, "no effect journal is configured")
	}
	var res touba.EffectResolution
	switch r.State {
	case touba.EffectApplied:
		if r.ReceiptRef == "" {
			return nil, badRequest("--applied needs --receipt-ref")
		}
		if r.Result != nil && !json.Valid(r.Result) {
			return nil, badRequest("--result is not valid JSON")
		}
		res = touba.EffectResolution{State: touba.EffectApplied, ReceiptRef: r.ReceiptRef, Result: r.Result}
	case touba.EffectNotApplied:
		if r.ReceiptRef != "" || r.Result != nil {
			return nil, badRequest("--not-applied takes no --receipt-ref or --result")
		}
		res = touba.EffectResolution{State: touba.EffectNotApplied}
	default:
		return nil, badRequest("verdict %q: want applied or not_applied", r.State)
	}
	res.Operator, res.Reason = Operator(ctx), r.Reason
	target := r.Scope + "/" + r.EffectID
	cur, err := s.Journal.Get(ctx, r.Scope, r.EffectID)
	if err != nil {
		return nil, err
	} else if cur == nil {
		return nil, notFound("no effect %s in the journal", target)
	}
	if err := s.Journal.Resolve(context.WithoutCancel(ctx), r.Scope, r.EffectID, res); err != nil {
		s.audit(ctx, touba.OperatorEvent{Action: "effects.resolve", QueueID: r.Scope, Target: target, Outcome: "refused",
			Detail: r.State + ": " + errText(err), Reason: r.Reason})
		return nil, err
	}
	after, err := s.Journal.Get(ctx, r.Scope, r.EffectID)
	if err != nil || after == nil {
		return nil, fmt.Errorf("read resolved effect %s: %v", target, err)
	}
	out := &ResolveResult{Effect: *after}
	// Resolving a compensation settles the compensation only: the entry it
	// undid must not go on from the step it undid.
	if _, comp := touba.IsCompensation(r.EffectID); comp {
		out.Note = "a compensation: its entry is left as it is"
	} else if err := s.release(ctx, r.Scope, out); err != nil {
		return nil, err
	}
	detail := r.State
	if r.ReceiptRef != "" {
		detail += " receipt_ref=" + r.ReceiptRef
	}
	s.audit(ctx, touba.OperatorEvent{Action: "effects.resolve", QueueID: r.Scope, Target: target, Outcome: "done",
		Detail: detail + "; " + out.Note, Reason: r.Reason})
	return out, nil
}

// release puts the entry of a resolved effect back to pending when it is
// parked and no other effect of it awaits a verdict.
func (s *Service) release(ctx context.Context, scope string, out *ResolveResult) error {
	e, err := s.Queue.Get(ctx, scope)
	if err != nil {
		return err
	}
	if e == nil {
		out.Note = "no queue entry " + scope + " (pruned or another queue file)"
		return nil
	}
	out.EntryStatus = e.Status
	switch e.Status {
	case touba.StatusParked:
	case touba.StatusRunning:
		// Its run may still be recording its end (parked, a moment
		// later): nothing to put back now, so say what to do then.
		out.Note = "entry is running; once its run has ended (parked), replay it: touba-trigger queue replay " + scope
		return nil
	default:
		out.Note = "entry is " + e.Status + "; nothing to put back to pending"
		return nil
	}
	others, err := s.awaitingVerdict(ctx, scope)
	if err != nil {
		return err
	}
	if len(others) > 0 {
		out.Note = "entry stays parked: effect " + others[0].EffectID + " also awaits a verdict"
		return nil
	}
	if held := s.busy.take(s.Claims, scope, "replay"); held != "" {
		out.Note = "entry stays parked: a " + held + " of it is running; replay it once that ended"
		return nil
	}
	res, err := s.Queue.Replay(ctx, []string{scope}, touba.ReplayOptions{})
	s.busy.drop(s.Claims, scope)
	if err != nil {
		return err
	}
	if len(res) == 1 && res[0].To == touba.StatusCancelled {
		out.EntryStatus = touba.StatusCancelled
		out.Note = "entry " + cancelKeptHint(scope)
		return nil
	}
	if len(res) == 1 && res[0].From != "" {
		out.Replayed, out.EntryStatus = true, touba.StatusPending
		out.Note = "entry is pending again"
		if s.Wake != nil {
			s.Wake()
		}
		return nil
	}
	out.Note = "entry was not put back: " + res[0].Reason
	return nil
}

// Compensate runs the compensation of an applied effect whose binding
// declares support for it (SPEC §5). A CLI that goes away does not cut the
// call short: its outcome must be journaled either way.
func (s *Service) Compensate(ctx context.Context, r CompensateRequest) (*touba.Compensation, error) {
	if s.Journal == nil {
		return nil, touba.Errorf(touba.EEffectJournalRequired, "no effect journal is configured")
	}
	if s.Compensator == nil {
		return nil, badRequest("compensating needs the program and manifest: run it against the daemon, or give --program and --manifest")
	}
	target := r.Scope + "/" + r.EffectID
	orig, err := s.Journal.Get(ctx, r.Scope, r.EffectID)
	if err != nil {
		return nil, err
	} else if orig == nil {
		return nil, notFound("no effect %s in the journal", target)
	}
	// The entry is claimed before its status is checked, and held until
	// the call ends: a replay cannot resume it in between (see busy).
	if held := s.busy.take(s.Claims, r.Scope, "compensation"); held != "" {
		why := "entry " + r.Scope + " is busy with a " + held + "; try again once it ended"
		s.audit(ctx, touba.OperatorEvent{Action: "effects.compensate", QueueID: r.Scope, Target: target, Outcome: "refused", Detail: why, Reason: r.Reason})
		return nil, touba.Errorf(touba.EEntryBusy, "%s", why)
	}
	defer s.busy.drop(s.Claims, r.Scope)
	entry, err := s.Queue.Get(ctx, r.Scope)
	if err != nil {
		return nil, err
	} else if entry == nil {
		return nil, notFound("no queue entry %s: the original input cannot be rebuilt", r.Scope)
	}
	// Undoing a write under a run that may still build on it would race
	// the dispatcher: a run is compensated once it stopped.
	if entry.Status == touba.StatusPending || entry.Status == touba.StatusRunning || entry.Status == touba.StatusWaiting {
		why := "entry " + r.Scope + " is " + entry.Status + "; compensate once its run has stopped (done, failed, parked or cancelled)"
		s.audit(ctx, touba.OperatorEvent{Action: "effects.compensate", QueueID: r.Scope, Target: target, Outcome: "refused", Detail: why, Reason: r.Reason})
		return nil, badRequest("%s", why)
	}
	if s.afterCompensateCheck != nil {
		s.afterCompensateCheck()
	}
	effs, err := s.Journal.List(ctx, touba.EffectFilter{Scope: r.Scope})
	if err != nil {
		return nil, err
	}
	steps, err := s.stepOutputs(ctx, r.Scope, effs)
	if err != nil {
		return nil, err
	}
	if err := s.withGathered(ctx, entry); err != nil {
		return nil, err
	}
	c, err := s.Compensator(context.WithoutCancel(ctx), entry, steps, orig)
	if err != nil {
		s.audit(ctx, touba.OperatorEvent{Action: "effects.compensate", QueueID: r.Scope, Target: target, Outcome: "refused",
			Detail: errText(err), Reason: r.Reason})
		return nil, err
	}
	detail := "compensation " + c.CompensationID + ": " + c.State
	if c.Already {
		detail += " (already applied before; no call)"
	}
	if c.ErrorCode != "" {
		detail += " " + c.ErrorCode
	}
	s.audit(ctx, touba.OperatorEvent{Action: "effects.compensate", QueueID: r.Scope, Target: target, Outcome: "done", Detail: detail, Reason: r.Reason})
	return c, nil
}
