package server

import (
	"github.com/touba/touba-trigger/schedule"
	"github.com/touba/touba-trigger/trigger"
)

// scheduleSpecs are the program's schedule triggers as package schedule
// runs them.
func scheduleSpecs(p *trigger.Program) []schedule.Spec {
	var out []schedule.Spec
	for _, t := range p.Triggers {
		if sc := t.Source.Schedule; sc != nil {
			out = append(out, schedule.Spec{Ref: t.Ref, Cron: sc.Cron, Location: sc.Location, CatchUp: sc.CatchUp})
		}
	}
	return out
}

// newScheduler makes what enqueues the schedules' ticks through intake;
// start runs it, Shutdown stops it before intake drains.
func (s *Server) newScheduler(p *trigger.Program) *schedule.Scheduler {
	return schedule.New(scheduleSpecs(p), schedule.Options{Enqueue: s.intake, Ticks: s.store.Queue,
		Clock: s.cfg.ScheduleClock, Retention: s.cfg.Retention, Log: s.log.With().Str("component", "schedule").Logger()})
}

func (s *Server) stopScheduler() {
	if s.sched != nil {
		s.sched.Close()
	}
}
