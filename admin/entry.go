package admin

import (
	"context"
	//PRUNED
	//PRUNED
	//PRUNED
	"sort"
	"strings"
	//PRUNED
	//PRUNED

	//PRUNED

	touba "github.com/touba/touba-trigger"
)

// Entry returns an entry with its runs, checkpoints, effects, delivery
// history and operator events, and what an operator can do next.
func (s *Service) Entry(ctx context.Context, queueID string) (*EntryDetail, error) {
	d, err := s.Queue.Get(ctx, queueID)
	if err != nil {
		return nil, err
	} else if d == nil {
		return nil, notFound("no queue entry %s", queueID)
	}
	extra, err := s.Queue.Detail(ctx, queueID)
	if err != nil {
		return nil, err
	}
	out := &EntryDetail{Entry: entryOf(d, extra.BodyBytes), ErrorMessage: extra.ErrorMessage, NotBefore: extra.NotBefore,
		Headers: d.Headers, Runs: []touba.Run{}, Steps: []touba.StepOutput{}, Effects: []EffectDetail{},
		Deliveries: []touba.LoggedDelivery{}, Operator: []touba.OperatorEvent{}, Waits: []WaitDetail{}, MatchedWaits: []touba.Wait{}}
	if err := s.routes(ctx, extra.Routing, out); err != nil {
		return nil, err
	}
	if d.Body != nil {
		out.Body = bodyOf(d.Body)
	}
	if err := s.carries(ctx, &out.Entry); err != nil {
		return nil, err
	}
	if runs, err := s.State.Runs(ctx, queueID); err != nil {
		return nil, err
	} else if runs != nil {
		out.Runs = waitedRuns(runs, d.Status)
	}
	var effs []touba.Effect
	if s.Journal != nil {
		if effs, err = s.Journal.List(ctx, touba.EffectFilter{Scope: queueID}); err != nil {
			return nil, err
		}
		for _, e := range effs {
			ev, err := s.Journal.Events(ctx, e.Scope, e.EffectID)
			if err != nil {
				return nil, err
			}
			out.Effects = append(out.Effects, EffectDetail{Effect: e, Events: ev, Request: requestOf(ev)})
		}
	}
	steps, err := s.stepOutputs(ctx, queueID, effs)
	if err != nil {
		return nil, err
	}
	for _, so := range steps {
		out.Steps = append(out.Steps, so.Decoded())
	}
	sort.Slice(out.Steps, func(i, k int) bool { return out.Steps[i].At.Before(out.Steps[k].At) })
	if rows, err := s.State.Deliveries(ctx, touba.LogFilter{QueueID: queueID, Limit: 1000}); err != nil {
		return nil, err
	} else {
		for _, r := range rows {
			out.Deliveries = append(out.Deliveries, *r)
		}
	}
	if ev, err := s.State.OperatorEvents(ctx, queueID, 1000); err != nil {
		return nil, err
	} else if ev != nil {
		out.Operator = ev
	}
	if err := s.waits(ctx, d, out); err != nil {
		return nil, err
	}
	if err := s.gathering(ctx, d, out); err != nil {
		return nil, err
	}
	out.ResumeSteps = s.resumeSteps(ctx, d)
	out.Next = s.next(ctx, d, out)
	return out, nil
}

// stepOutputs are the outputs of an entry's steps: its checkpoints, and
// the results of its applied external writes (effs, the entry's effects),
// which the journal holds instead of a checkpoint: the dispatcher writes
// none for them. Those have no RunID: the journal names the call.
func (s *Service) stepOutputs(ctx context.Context, queueID string, effs []touba.Effect) (map[string]touba.StepOutput, error) {
	steps, err := s.State.Steps(ctx, queueID)
	if err != nil {
		return nil, err
	} else if steps == nil {
		steps = map[string]touba.StepOutput{}
	}
	// After a resume with new effects a step's write is named by its
	// generation (touba.EffectIDFor): only the current one's result is the
	// step's output, under the step's id.
	gens := map[string]int{}
	if ws := s.waitStore(); ws != nil {
		if gens, err = ws.EffectGens(ctx, queueID); err != nil {
			return nil, err
		}
	}
	for _, e := range effs {
		id, ok := touba.StepOfEffect(queueID, e.EffectID)
		if _, comp := touba.IsCompensation(e.EffectID); !ok || comp || e.State != touba.EffectApplied || len(e.Result) == 0 {
			continue
		}
		if e.EffectID != touba.EffectIDFor(queueID, id, gens[id]) {
			continue
		}
		if _, ok := steps[id]; !ok {
			steps[id] = touba.StepOutput{StepID: id, Output: e.Result, At: e.UpdatedAt}
		}
	}
	return steps, nil
}

// next says what an operator can do with an entry in its present state.
func (s *Service) next(ctx context.Context, d *touba.Delivery, det *EntryDetail) []string {
	out := s.nextFor(ctx, d, det)
	if len(det.ResumeSteps) > 0 {
		out = append(out, "to run it again from a step (earlier steps are read back): touba-trigger queue resume "+d.QueueID+
			" --from STEP [--new-effects]   (steps: "+strings.Join(det.ResumeSteps, ", ")+")")
	}
	return out
}

func (s *Service) nextFor(ctx context.Context, d *touba.Delivery, det *EntryDetail) []string {
	switch d.Status {
	case touba.StatusParked:
		var out []string
		for _, e := range det.Effects {
			if s.blocks(ctx, e.Effect) {
				out = append(out, resolveHint(e.Scope, e.EffectID))
			}
		}
		if len(out) == 0 {
			out = append(out, "no effect awaits a verdict; after fixing the cause ("+d.ErrorCode+"): touba-trigger queue replay "+d.QueueID)
		}
		return out
	case touba.StatusFailed:
		return []string{"after fixing the cause (" + d.ErrorCode + "): touba-trigger queue replay " + d.QueueID}
	case touba.StatusCancelled:
		return []string{"cancelled (" + d.ErrorCode + "); to run it anyway: touba-trigger queue replay " + d.QueueID}
	case touba.StatusWaiting:
		if h := gatheringHint(det); h != "" {
			return []string{h}
		}
		return []string{waitingHint(det)}
	case touba.StatusMerged:
		return []string{gatheringHint(det), "to run its gathering again: touba-trigger queue replay " + d.QueueID +
			" (replays its carrier " + d.MergedInto + ", once that is failed, parked or cancelled)"}
	case touba.StatusDone:
		return []string{doneHint(ctx, s, d)}
	case touba.StatusPending:
		if det.NotBefore != nil {
			return []string{"waiting for its next attempt at " + touba.FormatTime(*det.NotBefore)}
		}
		return []string{"waiting for a dispatcher worker"}
	}
	return nil
}

// blocking reports whether an effect stops its run until an operator
// gives a verdict: unknown, and not safe to send again.
func blocking(e touba.Effect) bool {
	return e.State == touba.EffectUnknown && e.RetryMode != touba.RetryIdempotencyKey
}

// blocks is blocking, counting as unknown a dispatched effect that no call
// of the daemon holds any more (its outcome failed to commit): the next
// attempt or `effects resolve` records it unknown.
func (s *Service) blocks(ctx context.Context, e touba.Effect) bool {
	if e.State == touba.EffectDispatched && e.RetryMode != touba.RetryIdempotencyKey && s.Journal != nil {
		return s.Journal.Orphaned(ctx, e.Scope, e.EffectID)
	}
	return blocking(e)
}

// awaitingVerdict returns the effects of entry scope that block its run
// until an operator resolves them.
func (s *Service) awaitingVerdict(ctx context.Context, scope string) ([]touba.Effect, error) {
	effs, err := s.Journal.List(ctx, touba.EffectFilter{Scope: scope})
	if err != nil {
		return nil, err
	}
	var out []touba.Effect
	for _, e := range effs {
		if s.blocks(ctx, e) {
			out = append(out, e)
		}
	}
	return out, nil
}

func resolveHint(scope, effectID string) string {
	return "find out whether " + effectID + " happened, then: touba-trigger effects resolve " + scope + " " + effectID +
		" --applied --receipt-ref REF [--result FILE]   or   --not-applied"
}

// doneHint tells how to run a done entry's event again: a replay would
// only read its effects back from the journal. Only a stored redelivery of
// the same body is offered (code TriggerReplayRejected, answered 200 or 409
// per source.redelivery): a conflicting delivery of the id carries another
// body, and enqueuing it as the same event would run what the sender never
// meant as this one.
func doneHint(ctx context.Context, s *Service, d *touba.Delivery) string {
	rows, err := s.State.Deliveries(ctx, touba.LogFilter{QueueID: d.QueueID, Code: touba.ETriggerReplayRejected, Limit: 100})
	if err == nil {
		for _, r := range rows {
			if r.BodyStored && r.Digest == d.Digest {
				return "for a real re-run, enqueue a stored redelivery of it as a new entry: touba-trigger deliveries replay " +
					r.DeliveryID + " --new-event-id"
			}
		}
	}
	return "for a real re-run, have the sender re-send the event with a new event id"
}
