package admin

import (
	"context"
	"encoding/json"

	touba "github.com/touba/touba-trigger"
)

// EffectInput is the step input effect scope/effectID was sent, rebuilt
// from the stored body and step outputs and checked against the journaled
// fingerprint (dispatcher.StepInput); CompensationInputUnavailable when it
// cannot be rebuilt as it was (no program loaded, the program or the body
// changed since).
func (s *Service) EffectInput(ctx context.Context, scope, effectID string) (json.RawMessage, error) {
	if s.Journal == nil || s.StepInput == nil {
		return nil, touba.Errorf(touba.ECompensationInputUnavailable, "no program is loaded to rebuild the input with")
	}
	entry, err := s.Queue.Get(ctx, scope)
	if err != nil {
		return nil, err
	} else if entry == nil {
		return nil, notFound("no queue entry %s", scope)
	}
	effs, err := s.Journal.List(ctx, touba.EffectFilter{Scope: scope})
	if err != nil {
		return nil, err
	}
	var eff *touba.Effect
	for i := range effs {
		if effs[i].EffectID == effectID {
			eff = &effs[i]
		}
	}
	if eff == nil {
		return nil, notFound("no effect %s/%s in the journal", scope, effectID)
	}
	steps, err := s.stepOutputs(ctx, scope, effs)
	if err != nil {
		return nil, err
	}
	if err := s.withGathered(ctx, entry); err != nil {
		return nil, err
	}
	return s.StepInput(entry, steps, eff)
}
