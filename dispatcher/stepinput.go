package dispatcher

import (
	"encoding/json"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/trigger"
)

// StepInput rebuilds the input the step of effect e was sent, from what is
// stored: the entry's body and the outputs of the steps before it, under
// the running program. It is returned only when its fingerprint is the one
// the journal holds, so what an operator is shown is what the handler saw;
// otherwise CompensationInputUnavailable says why it cannot be.
func StepInput(cfg *Config, entry *touba.Delivery, steps map[string]touba.StepOutput, e *touba.Effect) (json.RawMessage, error) {
	if cfg == nil {
		return nil, touba.Errorf(touba.ECompensationInputUnavailable, "no program is loaded")
	}
	t, idx, err := effectStep(cfg, entry, e)
	if err != nil {
		return nil, err
	}
	return rebuildInput(cfg, t, idx, entry, steps, e)
}

// effectStep finds the trigger and the index of the step that effect e of
// entry names ("<queue_id>:<step>", "<queue_id>:<step>#<n>" after a
// resume with new effects, or its compensation).
func effectStep(cfg *Config, entry *touba.Delivery, e *touba.Effect) (*trigger.Trigger, int, error) {
	id := e.EffectID
	if orig, ok := touba.IsCompensation(id); ok {
		id = orig
	}
	stepID, ok := touba.StepOfEffect(e.Scope, id)
	if !ok || entry == nil || entry.QueueID != e.Scope {
		return nil, 0, touba.Errorf(touba.ECompensationInputUnavailable, "effect %s does not name a step of entry %s",
			e.EffectID, e.Scope)
	}
	t, ok := cfg.trigger(entry.TriggerRef)
	if !ok {
		return nil, 0, touba.Errorf(touba.ECompensationInputUnavailable, "trigger %s is not in the running program", entry.TriggerRef)
	}
	for i, st := range t.Steps {
		if st.ID == stepID {
			return t, i, nil
		}
	}
	return nil, 0, touba.Errorf(touba.ECompensationInputUnavailable, "trigger %s has no step %q any more", t.Ref, stepID)
}

// rebuildInput resolves step idx of t in the run context the original call
// saw (the event, and the outputs of the steps before it) and checks it
// against the fingerprint journaled for e.
func rebuildInput(cfg *Config, t *trigger.Trigger, idx int, entry *touba.Delivery, steps map[string]touba.StepOutput,
	e *touba.Effect) (json.RawMessage, error) {
	st := t.Steps[idx]
	rc := newRunContext(entry, nil)
	for _, prev := range t.Steps[:idx] {
		if so, ok := steps[prev.ID]; ok {
			if err := rc.setOutput(prev.ID, so.Output); err != nil {
				return nil, touba.Errorf(touba.ECompensationInputUnavailable, "checkpoint of step %s: %v", prev.ID, err)
			}
		}
	}
	input, err := rc.resolve(cfg, st.Input, st.Inputs)
	if err != nil {
		return nil, touba.Errorf(touba.ECompensationInputUnavailable, "cannot rebuild the input of step %s: %s", st.ID, touba.ErrorMessage(err))
	}
	op := touba.OperationInvoke
	if e.Operation == touba.OperationCompensate {
		op = touba.OperationCompensate
	}
	if fp, err := handler.Fingerprint(st.Tool, op, input); err != nil || fp != e.Fingerprint {
		return nil, touba.Errorf(touba.ECompensationInputUnavailable,
			"the rebuilt input of step %s is not the one the original call sent (fingerprint %s, journaled %s); "+
				"the program, a checkpoint or the body (retention) changed since", st.ID, fp, e.Fingerprint)
	}
	return input, nil
}
