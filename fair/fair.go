// Package fair shares a node's free workers among the triggers that have
// runnable entries, in proportion to their dispatch weights (SPEC §2.1
// dispatch), and plans each lease as asks per trigger, so that one
// trigger's backlog never fills a lease and never delays another
// trigger's entry by more than its share.
//
// It is stride scheduling over the runs started: each trigger has a pass
// that grows by 1/weight with every run it is given, and every free
// worker goes to the trigger with the lowest pass. A trigger that had no
// runnable work (its ask took less than it asked), or whose work no
// binding let start, is not owed what it did not use: when it can run
// again, its pass starts at the lowest pass of the triggers still
// backlogged, so idling and waiting on a binding bank no credit.
//
// A trigger's work is its fresh entries and its runs handed back on a
// binding at any step (SPEC §2.2 "Holds take nothing"): one plan for
// both, the held runs first within the trigger's share (they are older).
// A bounded binding (max_concurrency, circuit) lets only so many runs
// start in a lease (its budget); the triggers that start on it, fresh or
// handed back, share it by a second stride pass per binding and trigger,
// with the same rule against banked credit. The package does no I/O and
// keeps no clock: the dispatcher hands it the candidates and budgets
// (PlanLease) and the store reports what each ask took.
package fair

import "math"

// DefaultWeight is a trigger's weight when its program gives none.
const DefaultWeight = 10

// Candidate is a trigger that may have runnable entries this lease.
type Candidate struct {
	Ref    string
	Weight int
	// Limit bounds the fresh runs it may start in this lease (0 while
	// paused); negative is no bound.
	Limit int
	// Gate is the binding its fresh runs start on first, whose budget
	// bounds them; "" for none.
	Gate string
	// ByKey: its asks share its runs among its concurrency key's values
	// in turn (touba.LeaseAsk.ByKey).
	ByKey bool
	// Held are its runs handed back, by binding: asked for before its
	// fresh entries, each within its binding's budget.
	Held []Held
}

// Held is how many of a trigger's runs were handed back on a hold.
type Held struct {
	Hold string
	N    int
}

// Scheduler keeps the triggers' passes from lease to lease. It is used
// by one leaser goroutine: not safe for concurrent use.
type Scheduler struct {
	shares map[string]*share
	// slots are the passes of the triggers on each bounded binding.
	slots map[string]map[string]*share
}

type share struct {
	pass float64
	// backlogged: at its last lease the trigger could have taken more
	// than it was given (it took all it asked, or was not asked: others
	// came first); for a binding's share, its runs on the binding were
	// not all taken.
	backlogged bool
}

// New returns a scheduler with no history.
func New() *Scheduler {
	return &Scheduler{shares: map[string]*share{}, slots: map[string]map[string]*share{}}
}

// Backlogged reports whether ref had work left at its last lease.
func (s *Scheduler) Backlogged(ref string) bool {
	sh, ok := s.shares[ref]
	return ok && sh.backlogged
}

// Forget drops the history of triggers not in keep (a reload removed them).
func (s *Scheduler) Forget(keep func(ref string) bool) {
	for ref := range s.shares {
		if !keep(ref) {
			delete(s.shares, ref)
		}
	}
	for b, m := range s.slots {
		for ref := range m {
			if !keep(ref) {
				delete(m, ref)
			}
		}
		if len(m) == 0 {
			delete(s.slots, b)
		}
	}
}

func (s *Scheduler) slotShare(binding, ref string) *share {
	m := s.slots[binding]
	if m == nil {
		m = map[string]*share{}
		s.slots[binding] = m
	}
	sh := m[ref]
	if sh == nil {
		sh = &share{}
		m[ref] = sh
	}
	return sh
}

// Plan starts a lease of at most free entries among cands. budgets is
// how many runs may start on each bounded binding (a binding not named
// bounds nothing). The Round it returns is the store's LeasePlan.
func (s *Scheduler) Plan(free int, budgets map[string]int, cands []Candidate) *Round {
	r := &Round{s: s, free0: free, budget0: map[string]int{}}
	for b, n := range budgets {
		r.budget0[b] = max(n, 0)
	}
	floor, anyBacklogged := math.Inf(1), false
	for _, c := range cands {
		sh := s.shares[c.Ref]
		if sh == nil {
			sh = &share{}
			s.shares[c.Ref] = sh
		}
		if sh.backlogged {
			anyBacklogged = true
			floor = math.Min(floor, sh.pass)
		}
	}
	onBinding := map[string][]*share{} // the shares of each bounded binding's contenders
	seen := map[*share]bool{}
	for _, c := range cands {
		sh := s.shares[c.Ref]
		if !anyBacklogged {
			sh.pass = 0
		} else if !sh.backlogged {
			sh.pass = math.Max(sh.pass, floor)
		}
		w := c.Weight
		if w <= 0 {
			w = DefaultWeight
		}
		e := &entry{Candidate: c, sh: sh, step: 1 / float64(w), pass0: sh.pass}
		for _, h := range c.Held {
			if h.N > 0 {
				e.srcs = append(e.srcs, &source{e: e, hold: h.Hold, binding: h.Hold, n: h.N})
			}
		}
		e.srcs = append(e.srcs, &source{e: e, binding: c.Gate, n: c.Limit})
		for _, src := range e.srcs {
			if src.binding == "" {
				continue
			}
			if _, bounded := r.budget0[src.binding]; !bounded {
				// Unbounded now: its share starts afresh when it is
				// bounded again, whatever this trigger did meanwhile.
				if m := s.slots[src.binding]; m != nil && m[c.Ref] != nil {
					m[c.Ref].backlogged = false
				}
				continue
			}
			src.q = s.slotShare(src.binding, c.Ref)
			if !seen[src.q] {
				seen[src.q] = true
				onBinding[src.binding] = append(onBinding[src.binding], src.q)
			}
		}
		r.cands = append(r.cands, e)
	}
	for _, shares := range onBinding {
		floor, anyBacklogged := math.Inf(1), false
		for _, q := range shares {
			if q.backlogged {
				anyBacklogged = true
				floor = math.Min(floor, q.pass)
			}
		}
		for _, q := range shares {
			if !anyBacklogged {
				q.pass = 0
			} else if !q.backlogged {
				q.pass = math.Max(q.pass, floor)
			}
			r.q0 = append(r.q0, qpass{q, q.pass})
		}
	}
	r.Reset()
	return r
}
