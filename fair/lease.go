package fair

import "sort"

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

// PlanLease plans l as one round over every trigger's work: its fresh
// entries and its runs handed back on any binding, at any step, by its
// weight. A paused trigger is given nothing, and its held runs count for
// no one: they neither take nor hold back anyone's share of a binding. A
// trigger with held runs that l.Triggers does not name (a reload removed
// it) is a candidate at the default weight, so its runs end.
func (s *Scheduler) PlanLease(l Lease) *Round {
	holds := make([]string, 0, len(l.Held))
	for hold := range l.Held {
		holds = append(holds, hold)
	}
	sort.Strings(holds)
	cands := make([]Candidate, 0, len(l.Triggers))
	named := map[string]bool{}
	add := func(t Trigger) {
		named[t.Ref] = true
		if l.Paused[t.Ref] {
			cands = append(cands, Candidate{Ref: t.Ref, Weight: t.Weight, Limit: 0})
			return
		}
		c := Candidate{Ref: t.Ref, Weight: t.Weight, Limit: -1, Gate: t.Gate, ByKey: t.ByKey}
		for _, hold := range holds {
			if n := l.Held[hold][t.Ref]; n > 0 {
				c.Held = append(c.Held, Held{Hold: hold, N: int(min(n, 1<<30))})
			}
		}
		cands = append(cands, c)
	}
	for _, t := range l.Triggers {
		if !named[t.Ref] {
			add(t)
		}
	}
	var rest []string
	for _, hold := range holds {
		for ref, n := range l.Held[hold] {
			if n > 0 && !named[ref] {
				named[ref] = true
				rest = append(rest, ref)
			}
		}
	}
	sort.Strings(rest)
	for _, ref := range rest {
		add(Trigger{Ref: ref, Weight: DefaultWeight})
	}
	return s.Plan(l.Free, l.Budgets, cands)
}
