package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"

	touba "github.com/touba/touba-trigger"
)

// Re-pinning (SPEC §2.3 reloads, `--repin`). An entry parked
// ProgramChanged was accepted under a definition of its trigger that the
// running program no longer matches: run again as it is, it would park
// again. Replayed or resumed with --repin it is pinned to the running
// definition: the steps it completed under the old one are matched by id
// (same id and kind: kept, read back), every other step of the running
// definition runs, and what it completed that the running one lacks is
// dropped. The plan says which is which before anything changes.

// RepinPlan is what --repin keeps and runs again of one entry.
type RepinPlan struct {
	From string `json:"from_definition"` // the digest the entry was pinned to (short)
	To   string `json:"to_definition"`   // the running definition's (short)
	// Kept are the steps completed under the old definition that the
	// running one has with the same id and kind: read back, not run.
	Kept []string `json:"kept"`
	// Again are the running definition's steps that run.
	Again []string `json:"run_again"`
	// Dropped are steps completed under the old definition that the
	// running one lacks (or has as another kind): their outputs go unused.
	Dropped []string `json:"dropped,omitempty"`
	digest  string
}

// runningTrigger is ref in the running program; false when none is
// loaded or it lacks ref.
func (s *Service) runningTrigger(ref string) (ProgramTrigger, bool) {
	if s.ProgramTriggers == nil {
		return ProgramTrigger{}, false
	}
	for _, pt := range s.ProgramTriggers() {
		if pt.Ref == ref {
			return pt, true
		}
	}
	return ProgramTrigger{}, false
}

// programKnown tells whether the running program is known: a daemon
// serves this request (the CLI on the files runs none).
func (s *Service) programKnown() bool {
	return s.ProgramTriggers != nil && s.ProgramTriggers() != nil
}

// repinChoice is what a replay or resume of d does about its pin: with
// repin, the plan when the running definition differs from d's (nil when
// it does not). refusal, when not empty, says why it must not run: the
// running program lacks d's trigger (it would park again, whatever the
// flags), or d is parked ProgramChanged, the running definition still
// differs and repin is off. cmd is the command the operator ran, for the
// refusal to name; from is a resume's step ("" for a replay).
func (s *Service) repinChoice(ctx context.Context, d *touba.Delivery, repin bool, cmd, from string) (plan *RepinPlan, refusal string, err error) {
	pt, ok := s.runningTrigger(d.TriggerRef)
	if !ok && s.programKnown() {
		return nil, fmt.Sprintf("its trigger %s is not in the running program: run now it would park again; "+
			"add the trigger back (a reload), then %s", d.TriggerRef, cmd), nil
	}
	differs := ok && pt.Digest != "" && pt.Digest != d.ProgramDigest
	switch {
	case repin && differs:
		plan, err = s.repinPlan(ctx, d, from)
		return plan, "", err
	case !repin && differs && d.Status == touba.StatusParked && d.ErrorCode == touba.EProgramChanged:
		return nil, fmt.Sprintf("it is parked %s: its trigger changed under it (it was accepted under definition %s); run as it is it would park again: "+
			"%s --repin pins it to the running program's definition (the steps it completed are kept where the running definition has them)",
			touba.EProgramChanged, ShortDigest(d.ProgramDigest), cmd), nil
	}
	return nil, "", nil
}

// repinPlan is what pinning d to the running definition keeps and runs;
// from, when set, is the step a resume runs again from (it and later
// steps run whatever they completed).
func (s *Service) repinPlan(ctx context.Context, d *touba.Delivery, from string) (*RepinPlan, error) {
	pt, ok := s.runningTrigger(d.TriggerRef)
	if !ok {
		return nil, touba.Errorf(touba.EEntryNotResumable, "the running program has no trigger %s to pin entry %s to", d.TriggerRef, d.QueueID)
	}
	plan := &RepinPlan{From: ShortDigest(d.ProgramDigest), To: ShortDigest(pt.Digest), digest: pt.Digest}
	old, err := s.pinnedSteps(ctx, d)
	if err != nil {
		return nil, err
	}
	done, err := s.completedSteps(ctx, d.QueueID, old)
	if err != nil {
		return nil, err
	}
	start := len(pt.Steps) // the first step a resume runs again
	if i := slices.Index(pt.Steps, from); from != "" && i >= 0 {
		start = i
	}
	for i, id := range pt.Steps {
		if kind, ok := done[id]; ok && kind == pt.StepKinds[id] && i < start {
			plan.Kept = append(plan.Kept, id)
		} else {
			plan.Again = append(plan.Again, id)
		}
	}
	for _, st := range old {
		if kind, ok := done[st.ID]; ok && kind != pt.StepKinds[st.ID] {
			plan.Dropped = append(plan.Dropped, st.ID) // absent (no kind) or another kind
		}
	}
	return plan, nil
}

// completedSteps are the steps of old (the pinned definition) that entry
// id completed, with their kind: a checkpoint, or a tool step's effect
// journaled applied.
func (s *Service) completedSteps(ctx context.Context, id string, old []defStep) (map[string]string, error) {
	cps, err := s.State.Steps(ctx, id)
	if err != nil {
		return nil, err
	}
	var gens map[string]int
	if ws := s.waitStore(); ws != nil {
		if gens, err = ws.EffectGens(ctx, id); err != nil {
			return nil, err
		}
	}
	done := map[string]string{}
	for _, st := range old {
		_, ok := cps[st.ID]
		if !ok && st.Tool != "" && s.Journal != nil {
			e, err := s.Journal.Get(ctx, id, touba.EffectIDFor(id, st.ID, gens[st.ID]))
			if err != nil {
				return nil, err
			}
			ok = e != nil && e.State == touba.EffectApplied
		}
		if ok {
			done[st.ID] = st.kind()
		}
	}
	return done, nil
}

// kind is the step's kind as trigger.Step.Kind names it: its tool, or
// sleep, or wait_for.
func (st defStep) kind() string {
	switch {
	case st.WaitFor != nil:
		return "wait_for"
	case len(st.Sleep) > 0 && string(st.Sleep) != "null":
		return "sleep"
	}
	return st.Tool
}

// String is the plan in one line per part, for prompts and notes.
func (p *RepinPlan) String() string {
	none := func(l []string) string {
		if len(l) == 0 {
			return "none"
		}
		return strings.Join(l, ", ")
	}
	s := fmt.Sprintf("pinned from definition %s to %s; kept (read back, not run): %s; run again: %s", p.From, p.To, none(p.Kept), none(p.Again))
	if len(p.Dropped) > 0 {
		s += "; dropped (completed under the old definition, not in the running one): " + none(p.Dropped)
	}
	return s
}
