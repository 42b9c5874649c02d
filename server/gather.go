package server

import (
	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/trigger"
)

// watchGatherings registers the gatherings' metrics (SPEC §2.1 debounce,
// batch) when the queue store keeps gatherings, and has intake report
// each gathered delivery (gathered).
func (s *Server) watchGatherings(p *trigger.Program) {
	gs, ok := s.store.Queue.(touba.GatherStore)
	if !ok {
		return
	}
	s.metrics.WatchGatherings(gs.GatherCounts)
	s.gatheringTriggers(p)
	s.intake.Gathered = s.gathered
}

// gatheringTriggers gives the gathering counter a series for each trigger
// of p that gathers (at start, and at each reload).
func (s *Server) gatheringTriggers(p *trigger.Program) {
	if p == nil {
		return
	}
	var refs []string
	for _, t := range p.Triggers {
		if t.Gather != nil {
			refs = append(refs, t.Ref)
		}
	}
	s.metrics.GatheringTriggers(refs)
}

// gathered counts a delivery intake gathered and, for one that opened a
// gathering, tells the wake loop when it starts: without that, the loop,
// asleep until its next known time, would start it up to a second late.
func (s *Server) gathered(triggerRef string, res touba.EnqueueResult) {
	s.metrics.ObserveGather(triggerRef, res.Gather)
	if disp := s.disp; disp != nil && res.Gather == touba.GatherOpened {
		disp.WakeAt(res.GatherWake)
	}
}
