package dispatcher

import (
	"context"
	"encoding/json"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/trigger"
)

// Version pinning (SPEC §2.3). Each entry keeps the digest of its
// trigger's definition when it was accepted, and the store keeps every
// definition applied since (savePrograms, at start and each reload). A
// run whose trigger changed since goes on only while every step it
// completed (a checkpoint, or an applied effect) is still there with the
// same id and kind; otherwise its earlier outputs no longer describe the
// program and an operator decides (parked ProgramChanged). An entry of the
// current definition, or on its first lease, reads nothing for this.

// saveTimeout bounds the definitions' writes of one start or reload.
const saveTimeout = 10 * time.Second

// savePrograms stores the definition of every trigger of c. A failure is
// logged, not fatal: an entry whose definition is unknown later runs
// unchecked, with a warning.
func (d *Dispatcher) savePrograms(c *Config) {
	if d.opts.Waits == nil || c == nil || c.Program == nil {
		return
	}
	ctx, cancel := context.WithTimeout(d.runCtx, saveTimeout)
	defer cancel()
	for _, t := range c.Program.Triggers {
		if t.Digest == "" {
			continue
		}
		if _, ok := d.saved.Load(t.Digest); ok {
			continue
		}
		if err := d.opts.Waits.SaveProgram(ctx, t.Digest, t.Definition); err != nil {
			d.log.Error().Err(err).Str("trigger_ref", t.Ref).Str("digest", t.Digest).
				Msg("cannot save the trigger's definition; its entries run unchecked after a later reload")
			continue
		}
		d.saved.Store(t.Digest, true)
	}
}

// pastStep is a step of a stored definition, as far as pinning reads it:
// its id and kind only, not trigger.ParseDefinition's strict check, so a
// definition stored by an earlier build still reads after the format
// grew.
type pastStep struct {
	ID      string          `json:"id"`
	Tool    string          `json:"tool"`
	Sleep   json.RawMessage `json:"sleep"`
	WaitFor json.RawMessage `json:"wait_for"`
}

// kind is what trigger.Step.Kind says of the same step.
func (s pastStep) kind() string {
	switch {
	case present(s.Sleep):
		return "sleep"
	case present(s.WaitFor):
		return "wait_for"
	}
	return s.Tool
}

func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// pinned checks a later lease of e against t when e was accepted under
// another definition of t; done are its checkpoints, gens its effect
// generations. It returns the verdict that parks the run, or nil.
func (d *Dispatcher) pinned(ctx context.Context, t *trigger.Trigger, e *touba.Delivery, done map[string]touba.StepOutput,
	gens map[string]int, log zerolog.Logger) *verdict {
	if d.opts.Waits == nil || e.FirstLease || e.ProgramDigest == "" || e.ProgramDigest == t.Digest {
		return nil
	}
	def, err := d.opts.Waits.Program(ctx, e.ProgramDigest)
	if err != nil {
		return &verdict{action: later, code: touba.EINTERNAL, message: "program of the entry: " + err.Error()}
	}
	if len(def) == 0 {
		log.Warn().Str("program_digest", e.ProgramDigest).
			Msg("the definition the entry was accepted under is unknown; it runs under the current one unchecked")
		return nil
	}
	var past struct {
		Steps []pastStep `json:"steps"`
	}
	if err := json.Unmarshal(def, &past); err != nil {
		return stop(park, touba.EProgramChanged, "the definition %s the entry was accepted under cannot be read: %v", e.ProgramDigest, err)
	}
	now := make(map[string]string, len(t.Steps))
	for _, st := range t.Steps {
		now[st.ID] = st.Kind()
	}
	for _, s := range past.Steps {
		_, completed := done[s.ID]
		// Only a tool step has an effect; an external write's has no
		// checkpoint (the journal holds its output).
		if !completed && d.journal != nil && s.Tool != "" && s.kind() == s.Tool {
			eff, err := d.journal.Get(ctx, e.QueueID, touba.EffectIDFor(e.QueueID, s.ID, gens[s.ID]))
			if err != nil {
				return &verdict{action: later, code: touba.EINTERNAL, message: "effect of step " + s.ID + ": " + err.Error()}
			}
			completed = eff != nil && eff.State == touba.EffectApplied
		}
		if !completed {
			continue
		}
		kind, ok := now[s.ID]
		if !ok {
			return stop(park, touba.EProgramChanged, "step %s, which the entry completed, is not in %s any more; replay or resume it",
				s.ID, t.Ref)
		}
		if kind != s.kind() {
			return stop(park, touba.EProgramChanged, "step %s, which the entry completed as %s, is %s now; replay or resume it",
				s.ID, s.kind(), kind)
		}
	}
	return nil
}
