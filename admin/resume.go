package admin

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/julienschmidt/httprouter"

	touba "github.com/touba/touba-trigger"
)

// Resume from a step (SPEC §6 `queue resume QUEUE_ID --from STEP
// [--new-effects]`): a done, failed, parked or cancelled entry runs again
// with its queue id from STEP. The checkpoints of STEP and every later
// step are dropped first, then the queue puts the entry back to pending
// and removes those steps' waits; earlier steps are read back. With
// NewEffects those steps get new effect identities (<queue_id>:<step>#<n>),
// so their writes happen again: the CLI and the console say so and ask
// before they send such a request.

// ResumeRequest is an operator's resume of entry QueueID from step From.
type ResumeRequest struct {
	QueueID    string `json:"queue_id"`
	From       string `json:"from"`
	NewEffects bool   `json:"new_effects,omitempty"`
	Reason     string `json:"reason,omitempty"` // the operator's --reason
	// DryRun checks the request and says which steps it would run again,
	// changing nothing (what the CLI's prompt and the console's
	// confirmation page show).
	DryRun bool `json:"dry_run,omitempty"`
	// IgnoreCancel (--ignore-cancel): a parked entry asked to cancel while
	// its step ran is resumed instead of ending cancelled (SPEC §2.3).
	IgnoreCancel bool `json:"ignore_cancel,omitempty"`
	// Repin (--repin) pins the entry to the running program's definition
	// of its trigger (SPEC §2.3); without it a ProgramChanged entry is
	// refused.
	Repin bool `json:"repin,omitempty"`
	// Operator names who asks when the context does not (WithOperator
	// wins: the socket's peer credentials and the console's login are
	// what the audit trail trusts); never read from the socket.
	Operator string `json:"-"`
}

// ResumeReport is what a resume did (or, for a dry run, would do).
type ResumeReport struct {
	QueueID string `json:"queue_id"`
	From    string `json:"from"`
	// Steps are From and the later steps of the trigger, run again.
	Steps []string `json:"steps"`
	// Left is the state the entry left; Status the one it is in now.
	Left       string `json:"left"`
	Status     string `json:"status"`
	NewEffects bool   `json:"new_effects,omitempty"`
	DryRun     bool   `json:"dry_run,omitempty"`
	// EffectIDs are the effect identities the steps run under now (with
	// NewEffects, the new ones; a dry run shows the current ones).
	EffectIDs map[string]string `json:"effect_ids,omitempty"`
	// Against names the definition the step was checked against.
	Against string `json:"checked_against"`
	// Cancels: the entry is parked with a cancel requested while its step
	// ran, so the resume ends it cancelled and runs nothing (unless
	// IgnoreCancel).
	Cancels bool `json:"cancels,omitempty"`
	// Repin is what --repin keeps and runs again.
	Repin *RepinPlan `json:"repin,omitempty"`
}

// StepEffectIDs are EffectIDs in the order of Steps.
func (r *ResumeReport) StepEffectIDs() []string {
	var ids []string
	for _, st := range r.Steps {
		ids = append(ids, r.EffectIDs[st])
	}
	return ids
}

// Resume implements API.
func (s *Service) Resume(ctx context.Context, r ResumeRequest) (*ResumeReport, error) {
	if r.Operator != "" && Operator(ctx) == "unknown" {
		ctx = WithOperator(ctx, r.Operator)
	}
	r.QueueID, r.From = strings.TrimSpace(r.QueueID), strings.TrimSpace(r.From)
	if r.QueueID == "" || r.From == "" {
		return nil, badRequest("a resume needs a queue id and the step to resume from (--from STEP)")
	}
	ev := touba.OperatorEvent{Action: "queue.resume", QueueID: r.QueueID, Target: r.QueueID, Reason: r.Reason,
		Detail: fmt.Sprintf("from %s, new_effects=%t", r.From, r.NewEffects)}
	refuse := func(err error) (*ResumeReport, error) {
		if !r.DryRun {
			ev.Outcome, ev.Detail = "refused", ev.Detail+": "+errText(err)
			s.audit(ctx, ev)
		}
		return nil, err
	}
	// Claimed before the status check and held until the queue's
	// update, as a replay: a compensation or a replay cannot start on
	// the entry in between, nor this one drop checkpoints under them.
	if held := s.busy.take(s.Claims, r.QueueID, "resume"); held != "" {
		return refuse(touba.Errorf(touba.EEntryBusy, "entry %s is busy with a %s; try again once it ended", r.QueueID, held))
	}
	defer s.busy.drop(s.Claims, r.QueueID)
	d, err := s.Queue.Get(ctx, r.QueueID)
	if err != nil {
		return nil, err
	} else if d == nil {
		return nil, notFound("no queue entry %s", r.QueueID)
	}
	if !touba.Resumable(d.Status) {
		hint := notResumableHint(d.Status)
		if d.Status == touba.StatusMerged {
			hint = " (its run is its carrier's: touba-trigger queue resume " + d.MergedInto + " --from STEP)"
		}
		return refuse(touba.Errorf(touba.EEntryNotResumable, "entry %s is %s: only done, failed, parked and cancelled entries are resumed%s",
			r.QueueID, d.Status, hint))
	}
	all, against, err := s.triggerSteps(ctx, d)
	if err != nil {
		return refuse(err)
	}
	i := slices.Index(all, r.From)
	if i < 0 {
		return refuse(touba.Errorf(touba.EEntryNotResumable, "%s has no step %q (checked against %s); its steps: %s",
			d.TriggerRef, r.From, against, strings.Join(all, ", ")))
	}
	rep := &ResumeReport{QueueID: r.QueueID, From: r.From, Steps: slices.Clone(all[i:]), Left: d.Status, Status: d.Status,
		NewEffects: r.NewEffects, DryRun: r.DryRun, Against: against}
	var refusal string
	if rep.Repin, refusal, err = s.repinChoice(ctx, d, r.Repin, "touba-trigger queue resume "+r.QueueID+" --from "+r.From, r.From); err != nil {
		return refuse(err)
	} else if refusal != "" {
		return refuse(touba.Errorf(touba.EEntryNotResumable, "entry %s: %s", r.QueueID, refusal))
	}
	ws := s.waitStore()
	if ws == nil {
		return nil, touba.Errorf(touba.EINTERNAL, "the queue store cannot resume entries")
	}
	gens, err := ws.EffectGens(ctx, r.QueueID)
	if err != nil {
		return nil, err
	}
	if d.Status == touba.StatusParked && !r.IgnoreCancel {
		if rep.Cancels, err = ws.CancelRequested(ctx, r.QueueID); err != nil {
			return nil, err
		}
	}
	if r.DryRun {
		if !rep.Cancels {
			rep.EffectIDs = effectIDs(r.QueueID, rep.Steps, gens, r.NewEffects)
		}
		return rep, nil
	}
	// Checkpoints first: once the entry is pending a worker may lease
	// it, and must find no output of a step it is to run again. An entry
	// that ends cancelled keeps them: a later replay reads them back.
	req := touba.ResumeRequest{QueueID: r.QueueID, Steps: rep.Steps, NewEffects: r.NewEffects, IgnoreCancel: r.IgnoreCancel || !rep.Cancels}
	drop := rep.Steps
	if rep.Repin != nil {
		// What the old definition completed and the running one lacks
		// goes too: no later definition reads a stale output by its id.
		req.Repin, drop = rep.Repin.digest, append(slices.Clone(rep.Steps), rep.Repin.Dropped...)
	}
	if !rep.Cancels {
		if err := s.State.DropSteps(ctx, r.QueueID, drop); err != nil {
			return nil, fmt.Errorf("drop the checkpoints of %s: %w", r.QueueID, err)
		}
	}
	res, err := ws.Resume(ctx, req)
	if err != nil {
		if touba.ErrorCode(err) == touba.EEntryNotResumable {
			return refuse(err)
		}
		return nil, err
	}
	if res.From != "" {
		rep.Left = res.From
	}
	rep.Status = res.To
	if rep.Status == touba.StatusCancelled {
		ev.Outcome = "done"
		ev.Detail = fmt.Sprintf("from %s: %s -> cancelled (a cancel requested while its step ran; nothing run)", r.From, rep.Left)
		s.audit(ctx, ev)
		return rep, nil
	}
	if res.Gens != nil {
		gens = res.Gens
	}
	rep.EffectIDs = effectIDs(r.QueueID, rep.Steps, gens, false)
	if s.Wake != nil {
		s.Wake()
	}
	ev.Outcome = "done"
	ev.Detail = fmt.Sprintf("from %s (steps %s), new_effects=%t: %s -> pending", r.From, strings.Join(rep.Steps, ", "),
		r.NewEffects, rep.Left)
	if r.IgnoreCancel {
		ev.Detail += " (--ignore-cancel)"
	}
	if rep.Repin != nil {
		ev.Detail += "; --repin: " + rep.Repin.String()
	}
	if r.NewEffects {
		ev.Detail += "; new effect ids " + strings.Join(rep.StepEffectIDs(), ", ")
	}
	s.audit(ctx, ev)
	return rep, nil
}

func notResumableHint(status string) string {
	switch status {
	case touba.StatusWaiting:
		return " (a waiting entry goes on by itself when its sleep ends or its event comes)"
	case touba.StatusPending, touba.StatusRunning:
		return " (its run is not over: resume it once it ended)"
	}
	return ""
}

// effectIDs are the effect identities of steps: at their generation in
// gens, or the next one when next is set (what NewEffects will give).
func effectIDs(queueID string, steps []string, gens map[string]int, next bool) map[string]string {
	out := make(map[string]string, len(steps))
	for _, st := range steps {
		g := gens[st]
		if next {
			g++
		}
		out[st] = touba.EffectIDFor(queueID, st, g)
	}
	return out
}

// triggerSteps are the step ids of d's trigger in the running program, in
// order, and what they were read from. With no program loaded (the CLI on
// the files) they are those of the definition the entry was accepted
// under, which the store keeps.
func (s *Service) triggerSteps(ctx context.Context, d *touba.Delivery) ([]string, string, error) {
	var pts []ProgramTrigger
	if s.ProgramTriggers != nil {
		pts = s.ProgramTriggers()
	}
	if pts != nil {
		for _, pt := range pts {
			if pt.Ref == d.TriggerRef {
				return pt.Steps, "the running program", nil
			}
		}
		return nil, "", touba.Errorf(touba.EEntryNotResumable, "the running program has no trigger %s", d.TriggerRef)
	}
	steps, err := s.pinnedSteps(ctx, d)
	if err != nil {
		return nil, "", err
	}
	if steps == nil {
		return nil, "", touba.Errorf(touba.EEntryNotResumable,
			"no program is loaded and the definition entry %s was accepted under is not stored: resume it through the running daemon", d.QueueID)
	}
	ids := make([]string, len(steps))
	for i, st := range steps {
		ids[i] = st.ID
	}
	return ids, "the definition the entry was accepted under (program " + ShortDigest(d.ProgramDigest) + "; no program loaded)", nil
}

// resumeSteps are the steps a resume of d may start from, for the console's
// form and `queue show`; nil when it cannot be resumed now.
func (s *Service) resumeSteps(ctx context.Context, d *touba.Delivery) []string {
	if !touba.Resumable(d.Status) || s.waitStore() == nil {
		return nil
	}
	steps, _, err := s.triggerSteps(ctx, d)
	if err != nil {
		return nil
	}
	return steps
}

// resumeRoutes serves Resume.
func resumeRoutes(rt *httprouter.Router, api API) {
	rt.POST("/v1/entries/resume", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		var req ResumeRequest
		if decode(w, r, &req) {
			reply(w)(api.Resume(r.Context(), req))
		}
	})
}

// Resume implements API.
func (c *Client) Resume(ctx context.Context, r ResumeRequest) (*ResumeReport, error) {
	return post[*ResumeReport](ctx, c, "/v1/entries/resume", r)
}
