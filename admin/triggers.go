package admin

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	touba "github.com/touba/touba-trigger"
)

// Triggers and their holds (SPEC §6 triggers ls | pause | resume, §6.1
// Triggers page): whether each trigger is paused, its dispatch weight, the
// circuits of its bindings that are not closed, and its runnable, held (by
// reason), waiting and running counts.

// TriggerAPI is the triggers' part of API.
type TriggerAPI interface {
	Triggers(ctx context.Context) ([]Trigger, error)
	PauseTrigger(ctx context.Context, r TriggerRequest) (*TriggerChange, error)
	ResumeTrigger(ctx context.Context, r TriggerRequest) (*TriggerChange, error)
	// TestTrigger tries a trigger on stored deliveries (triggertest.go).
	TestTrigger(ctx context.Context, r TriggerTestRequest) (*TriggerTest, error)
}

// Trigger is one trigger as operators see it.
type Trigger struct {
	TriggerRef string `json:"trigger_ref"`
	// InProgram is false for a trigger the running program lacks (known
	// only from its entries or its pause).
	InProgram bool `json:"in_program"`
	// Weight is its dispatch weight in the running program (SPEC §2.1
	// dispatch); 0, and left out, when no program gives it one.
	Weight   int       `json:"weight,omitempty"`
	Paused   bool      `json:"paused"`
	PausedAt time.Time `json:"paused_at,omitzero"`
	PausedBy string    `json:"paused_by,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	// Pending are its pending entries but those held behind their
	// concurrency key (Held): what it was before fair dispatch, kept for
	// compatibility. It includes the entries held by a pause or on a
	// binding (HeldPaused, HeldSlot, HeldCircuit); Runnable is what no
	// hold keeps back.
	Pending int64 `json:"pending"`
	// Runnable are the pending entries no hold keeps back (due or not):
	// what fair dispatch shares the workers among (SPEC §2.1 dispatch). 0
	// while the trigger is paused.
	Runnable int64 `json:"runnable"`
	// The pending entries held back (SPEC §2.2 "Holds take nothing"), by
	// reason, apart from each other: HeldPaused by the trigger's pause
	// (those no other hold keeps back), Held behind an earlier entry of
	// their concurrency key, HeldSlot and HeldCircuit handed back on their
	// binding (no free max_concurrency slot, an open circuit).
	HeldPaused  int64 `json:"held_paused"`
	Held        int64 `json:"held"`
	HeldSlot    int64 `json:"held_slot"`
	HeldCircuit int64 `json:"held_circuit"`
	// Waiting are entries in a sleep or a wait for an event (SPEC §2.3).
	Waiting int64    `json:"waiting"`
	Running int64    `json:"running"`
	Tools   []string `json:"tools,omitempty"`
	// Circuits are the circuits of its bindings that are not closed.
	Circuits []touba.CircuitState `json:"circuits,omitempty"`
	// NoWorker are its worker bindings with no worker connected (SPEC
	// §4.3): their calls wait.
	NoWorker []string `json:"no_worker,omitempty"`
	// RouteOf is, for a route, the trigger whose deliveries it takes, and
	// Routes are, for an accepting trigger, its routes (SPEC §2.4): a
	// listing shows each route right under its accepting trigger.
	RouteOf string   `json:"route_of,omitempty"`
	Routes  []string `json:"routes,omitempty"`
}

// HeldTotal is the sum of its pending entries held back, for every reason.
func (t Trigger) HeldTotal() int64 { return t.HeldPaused + t.Held + t.HeldSlot + t.HeldCircuit }

// HeldSummary is HeldTotal with its reasons in short, the largest first
// (ties in the order paused, key, slot, circuit): "12 (slot 10, key 2)",
// "-" when nothing is held. The CLI's triggers ls and the console's
// Triggers page show it.
func (t Trigger) HeldSummary() string {
	total := t.HeldTotal()
	if total == 0 {
		return "-"
	}
	type reason struct {
		name string
		n    int64
	}
	rs := []reason{{"paused", t.HeldPaused}, {"key", t.Held}, {"slot", t.HeldSlot}, {"circuit", t.HeldCircuit}}
	slices.SortStableFunc(rs, func(a, b reason) int { return cmp.Compare(b.n, a.n) })
	var parts []string
	for _, r := range rs {
		if r.n > 0 {
			parts = append(parts, r.name+" "+strconv.FormatInt(r.n, 10))
		}
	}
	return strconv.FormatInt(total, 10) + " (" + strings.Join(parts, ", ") + ")"
}

// TriggerRequest names a trigger to pause or resume, and why.
type TriggerRequest struct {
	TriggerRef string `json:"trigger_ref"`
	Reason     string `json:"reason,omitempty"`
}

// TriggerChange is what a pause or resume did.
type TriggerChange struct {
	TriggerRef string `json:"trigger_ref"`
	Paused     bool   `json:"paused"`
	// Changed is false when the trigger already was in that state.
	Changed bool `json:"changed"`
}

// ProgramTrigger is a trigger of the running program and the tools its
// steps call (Service.ProgramTriggers), its steps and its weight.
type ProgramTrigger struct {
	Ref   string
	Tools []string
	// Steps are the ids of its steps, in order (what `queue resume
	// --from` takes).
	Steps []string
	// Weight is its dispatch weight (trigger.Trigger.Weight).
	Weight int
	// Digest is its definition's digest (what entries are pinned to), and
	// StepKinds each step's kind (its tool, sleep or wait_for), for --repin.
	Digest    string
	StepKinds map[string]string
	// RouteOf is, for a route, its accepting trigger; Routes are, for an
	// accepting trigger, its routes in the program's order (SPEC §2.4).
	RouteOf string
	Routes  []string
}

func (s *Service) holds() (touba.HoldStore, error) {
	h, ok := s.Queue.(touba.HoldStore)
	if !ok {
		return nil, touba.Errorf(touba.EINTERNAL, "the queue store cannot pause triggers")
	}
	return h, nil
}

// Triggers lists the program's triggers, and any other trigger that has
// active entries or a pause, by ref.
func (s *Service) Triggers(ctx context.Context) ([]Trigger, error) {
	h, err := s.holds()
	if err != nil {
		return nil, err
	}
	paused, err := h.PausedTriggers(ctx)
	if err != nil {
		return nil, err
	}
	count := h.CountByTrigger
	if s.CountByTrigger != nil {
		count = s.CountByTrigger
	}
	counts, err := count(ctx)
	if err != nil {
		return nil, err
	}
	var circuits []touba.CircuitState
	if s.Circuits != nil {
		if circuits, err = s.Circuits(ctx); err != nil {
			return nil, err
		}
	}
	by := map[string]*Trigger{}
	at := func(ref string) *Trigger {
		if by[ref] == nil {
			by[ref] = &Trigger{TriggerRef: ref}
		}
		return by[ref]
	}
	var noWorker []string
	if s.NoWorker != nil {
		noWorker = s.NoWorker()
	}
	if s.ProgramTriggers != nil {
		for _, pt := range s.ProgramTriggers() {
			t := at(pt.Ref)
			t.InProgram, t.Tools, t.Weight = true, pt.Tools, pt.Weight
			for _, ref := range noWorker {
				if slices.Contains(pt.Tools, ref) {
					t.NoWorker = append(t.NoWorker, ref)
				}
			}
			t.RouteOf, t.Routes = pt.RouteOf, pt.Routes
			for _, c := range circuits {
				if slices.Contains(pt.Tools, c.ToolRef) {
					t.Circuits = append(t.Circuits, c)
				}
			}
		}
	}
	for _, p := range paused {
		t := at(p.TriggerRef)
		t.Paused, t.PausedAt, t.PausedBy, t.Reason = true, p.At, p.Operator, p.Reason
	}
	for ref, c := range counts {
		t := at(ref)
		t.Pending = c[touba.StatusPending] - c["held"]
		t.Held, t.HeldSlot, t.HeldCircuit = c["held"], c[touba.HeldSlot], c[touba.HeldCircuit]
		t.Waiting, t.Running = c[touba.StatusWaiting], c[touba.StatusRunning]
		// The holds are apart from each other in the counts (a run handed
		// back on a binding is not counted behind its key), and all of
		// them are pending; a pause holds what else would run.
		free := max(0, c[touba.StatusPending]-t.Held-t.HeldSlot-t.HeldCircuit)
		if t.Paused {
			t.HeldPaused = free
		} else {
			t.Runnable = free
		}
	}
	out := make([]Trigger, 0, len(by))
	for _, t := range by {
		out = append(out, *t)
	}
	// Each route right under its accepting trigger, in the program's order.
	place := map[string]int{}
	for _, t := range by {
		for i, r := range t.Routes {
			place[r] = i
		}
	}
	slices.SortFunc(out, func(a, b Trigger) int {
		return cmp.Or(strings.Compare(cmp.Or(a.RouteOf, a.TriggerRef), cmp.Or(b.RouteOf, b.TriggerRef)),
			cmp.Compare(a.RouteOf, b.RouteOf), cmp.Compare(place[a.TriggerRef], place[b.TriggerRef]),
			strings.Compare(a.TriggerRef, b.TriggerRef))
	})
	return out, nil
}

// PauseTrigger pauses a trigger: its entries wait pending, intake still
// accepts. Audited, with the reason.
func (s *Service) PauseTrigger(ctx context.Context, r TriggerRequest) (*TriggerChange, error) {
	return s.changeTrigger(ctx, r, true)
}

// ResumeTrigger resumes a paused trigger and wakes the dispatcher.
func (s *Service) ResumeTrigger(ctx context.Context, r TriggerRequest) (*TriggerChange, error) {
	return s.changeTrigger(ctx, r, false)
}

func (s *Service) changeTrigger(ctx context.Context, r TriggerRequest, pause bool) (*TriggerChange, error) {
	ref := TriggerRef(strings.TrimSpace(r.TriggerRef))
	action := "trigger.resume"
	if pause {
		action = "trigger.pause"
	}
	ev := touba.OperatorEvent{Action: action, Target: ref, Detail: r.Reason}
	if ref == "" {
		return nil, badRequest("a trigger ref is required")
	}
	if pause && !s.inProgram(ref) {
		ev.Outcome = "refused: not a trigger of the running program"
		s.audit(ctx, ev)
		return nil, notFound("%s is not a trigger of the running program", ref)
	}
	h, err := s.holds()
	if err != nil {
		return nil, err
	}
	var changed bool
	if pause {
		changed, err = h.PauseTrigger(ctx, touba.TriggerPause{TriggerRef: ref, At: time.Now().UTC(), Operator: Operator(ctx), Reason: r.Reason})
	} else {
		changed, err = h.ResumeTrigger(ctx, ref)
	}
	if err != nil {
		ev.Outcome = "failed: " + errText(err)
		s.audit(ctx, ev)
		return nil, err
	}
	switch {
	case pause && changed:
		ev.Outcome = "paused"
	case pause:
		ev.Outcome = "already paused"
	case changed:
		ev.Outcome = "resumed"
	default:
		ev.Outcome = "not paused"
	}
	s.audit(ctx, ev)
	if changed && s.PausesChanged != nil {
		s.PausesChanged()
	}
	if !pause && changed && s.Wake != nil {
		s.Wake()
	}
	return &TriggerChange{TriggerRef: ref, Paused: pause, Changed: changed}, nil
}

// inProgram tells whether ref is a trigger of the running program; true
// when no program is loaded (the CLI on the files without --program).
func (s *Service) inProgram(ref string) bool {
	if s.ProgramTriggers == nil {
		return true
	}
	pts := s.ProgramTriggers()
	if pts == nil {
		return true
	}
	for _, pt := range pts {
		if pt.Ref == ref {
			return true
		}
	}
	return false
}

// triggerRoutes serves TriggerAPI.
func triggerRoutes(rt *httprouter.Router, api API) {
	rt.GET("/v1/triggers", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		reply(w)(api.Triggers(r.Context()))
	})
	rt.POST("/v1/triggers/pause", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		var req TriggerRequest
		if decode(w, r, &req) {
			reply(w)(api.PauseTrigger(r.Context(), req))
		}
	})
	rt.POST("/v1/triggers/resume", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		var req TriggerRequest
		if decode(w, r, &req) {
			reply(w)(api.ResumeTrigger(r.Context(), req))
		}
	})
	rt.POST("/v1/triggers/test", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		var req TriggerTestRequest
		if decode(w, r, &req) {
			reply(w)(api.TestTrigger(r.Context(), req))
		}
	})
}

// Triggers implements API.
func (c *Client) Triggers(ctx context.Context) ([]Trigger, error) {
	return get[[]Trigger](ctx, c, "/v1/triggers")
}

// PauseTrigger implements API.
func (c *Client) PauseTrigger(ctx context.Context, r TriggerRequest) (*TriggerChange, error) {
	return post[*TriggerChange](ctx, c, "/v1/triggers/pause", r)
}

// ResumeTrigger implements API.
func (c *Client) ResumeTrigger(ctx context.Context, r TriggerRequest) (*TriggerChange, error) {
	return post[*TriggerChange](ctx, c, "/v1/triggers/resume", r)
}

// TestTrigger implements API.
func (c *Client) TestTrigger(ctx context.Context, r TriggerTestRequest) (*TriggerTest, error) {
	return post[*TriggerTest](ctx, c, "/v1/triggers/test", r)
}
