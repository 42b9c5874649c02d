package server

import (
	"context"
	"maps"
	"slices"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/dispatcher"
)

// Holds on dispatch (paused triggers, circuits): their metrics, and what
// the admin service shows of them.

// watchHolds registers the holds' metrics; the transitions counter goes
// to the dispatcher made later (s.onCircuit).
func (s *Server) watchHolds() {
	st := s.store
	s.onCircuit = s.metrics.WatchHolds(st.Queue.PausedTriggers, s.circuitsNow, func() []string {
		var out []string
		if c := s.current.Load(); c != nil {
			for _, t := range c.Program.Triggers {
				out = append(out, t.Ref)
			}
		}
		return out
	}, func() []string {
		var out []string
		if c := s.current.Load(); c != nil {
			for ref, b := range c.Bindings {
				if b.Circuit.MinCalls > 0 {
					out = append(out, ref)
				}
			}
		}
		return out
	})
}

// watchHeld registers the gauges of each trigger's runnable, held (by
// reason) and running entries, read from the queue store at scrape time,
// and of the runs handed back on each binding (s.disp, made later, nil
// with no workers).
func (s *Server) watchHeld() {
	s.metrics.WatchTriggers(gatedCounts{s}, s.programTriggerRefs)
	s.metrics.WatchHeldRuns(func() map[string]int64 {
		if d := s.disp; d != nil {
			return d.Held()
		}
		return nil
	}, func() []string {
		var out []string
		if c := s.current.Load(); c != nil {
			for ref, b := range c.Bindings {
				if b.MaxConcurrency > 0 || b.Circuit.MinCalls > 0 {
					out = append(out, ref)
				}
			}
		}
		return out
	})
}

// programTriggerRefs lists the refs of the running program's triggers.
func (s *Server) programTriggerRefs() []string {
	var out []string
	if c := s.current.Load(); c != nil {
		for _, t := range c.Program.Triggers {
			out = append(out, t.Ref)
		}
	}
	return out
}

// circuitsNow is the circuits not closed: the cluster's on a shared
// database, else this daemon's dispatcher's.
func (s *Server) circuitsNow() []touba.CircuitState {
	if s.store.Circuits != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cs, err := s.store.Circuits.Circuits(ctx)
		if err != nil {
			s.log.Warn().Err(err).Msg("cannot read the circuits")
		}
		return cs
	}
	if d := s.disp; d != nil {
		return d.Circuits()
	}
	return nil
}

// programTriggers lists the triggers of a configuration and the tools
// their steps call.
func programTriggers(current func() *dispatcher.Config) func() []admin.ProgramTrigger {
	return func() []admin.ProgramTrigger {
		c := current()
		if c == nil {
			return nil
		}
		var out []admin.ProgramTrigger
		for _, t := range c.Program.Triggers {
			tools := map[string]bool{}
			var steps []string
			kinds := make(map[string]string, len(t.Steps))
			for _, st := range t.Steps {
				if st.Tool != "" { // a sleep or a wait_for calls no tool
					tools[st.Tool] = true
				}
				steps = append(steps, st.ID)
				kinds[st.ID] = st.Kind()
			}
			pt := admin.ProgramTrigger{Ref: t.Ref, Tools: slices.Sorted(maps.Keys(tools)), Steps: steps, Weight: t.Weight,
				Digest: t.Digest, StepKinds: kinds, RouteOf: t.Source.From}
			for _, r := range t.Routes {
				pt.Routes = append(pt.Routes, r.Ref)
			}
			out = append(out, pt)
		}
		return out
	}
}

// gatedCounts is the queue store's CountByTrigger with, for each trigger
// not paused whose first bound binding let none of its runs be leased
// (dispatcher Gated), its runnable entries counted held by that binding:
// they wait pending, in no lease, for a slot or the circuit's probe.
type gatedCounts struct{ s *Server }

func (g gatedCounts) PausedTriggers(ctx context.Context) ([]touba.TriggerPause, error) {
	return g.s.store.Queue.PausedTriggers(ctx)
}

func (g gatedCounts) CountByTrigger(ctx context.Context) (map[string]map[string]int64, error) {
	counts, err := g.s.store.Queue.CountByTrigger(ctx)
	if err != nil {
		return nil, err
	}
	d := g.s.disp
	if d == nil {
		return counts, nil
	}
	gated := d.Gated()
	if len(gated) == 0 {
		return counts, nil
	}
	paused, err := g.s.store.Queue.PausedTriggers(ctx)
	if err != nil {
		return nil, err
	}
	for ref, reason := range gated {
		c := counts[ref]
		if c == nil || slices.ContainsFunc(paused, func(p touba.TriggerPause) bool { return p.TriggerRef == ref }) {
			continue
		}
		if free := c[touba.StatusPending] - c["held"] - c[touba.HeldSlot] - c[touba.HeldCircuit]; free > 0 {
			c[reason] += free
		}
	}
	return counts, nil
}
