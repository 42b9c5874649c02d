package fair

import (
	"sort"

	touba "github.com/touba/touba-trigger"
)

// Lease is what the dispatcher knows when it plans a lease: its free
// workers, the triggers that may have work, what each binding lets start
// now, the runs handed back on the bindings and the paused triggers.
type Lease struct {
	Free     int
	Triggers []Trigger
	// Budgets is how many more runs may start on each bounded binding now
	// (its free max_concurrency slots less those promised, 0 behind an
	// open circuit, 1 when its probe is due); a binding not named bounds
	// nothing.
	Budgets map[string]int
	// Held counts the runs handed back, by hold (binding) and trigger, as
	// last read or counted: paused triggers' included.
	Held   map[string]map[string]int64
	Paused map[string]bool
}

// Trigger is one trigger of the lease.
type Trigger struct {
	Ref    string
	Weight int
	// Gate is the binding its fresh runs start on first (its first tool
	// step's, when that binding is bounded): "" when nothing bounds them.
	Gate  string
	ByKey bool
}

// budget is what b lets start, negative for no bound.
func (l *Lease) budget(b string) int {
	if n, ok := l.Budgets[b]; ok && b != "" {
		return max(n, 0)
	}
	return -1
}

// PlanLease plans l: holds first, then the triggers by weight.
func (s *Scheduler) PlanLease(l Lease) *Round {
	var holds []touba.LeaseAsk
	heldOn := map[string]int64{}
	for hold, by := range l.Held {
		for _, n := range by {
			heldOn[hold] += n
		}
	}
	refs := make([]string, 0, len(heldOn))
	for hold := range heldOn {
		refs = append(refs, hold)
	}
	sort.Strings(refs)
	for _, hold := range refs {
		n := heldOn[hold]
		if n <= 0 {
			continue
		}
		if can := l.budget(hold); can != 0 {
			if can > 0 {
				n = min(n, int64(can))
			}
			holds = append(holds, touba.LeaseAsk{Hold: hold, N: int(n)})
		}
	}
	cands := make([]Candidate, 0, len(l.Triggers))
	for _, t := range l.Triggers {
		if l.Paused[t.Ref] {
			cands = append(cands, Candidate{Ref: t.Ref, Weight: t.Weight, Limit: 0})
			continue
		}
		limit := -1
		if t.Gate != "" {
			if heldOn[t.Gate] > 0 {
				limit = 0
			} else {
				limit = l.budget(t.Gate)
			}
		}
		cands = append(cands, Candidate{Ref: t.Ref, Weight: t.Weight, Limit: limit, ByKey: t.ByKey})
	}
	return s.Plan(l.Free, holds, cands)
}
