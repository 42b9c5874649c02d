// Package fair shares a node's free workers among the triggers that have
// runnable entries, in proportion to their dispatch weights (SPEC §2.1
// dispatch), and plans each lease as asks per trigger, so that one
// trigger's backlog never fills a lease and never delays another
// trigger's entry by more than its share.
//
// It is stride scheduling over the runs started: each trigger has a pass
// that grows by 1/weight with every run it is given, and every free
// worker goes to the trigger with the lowest pass. A trigger that had no
// runnable work (its ask took less than it asked) is not owed what it did
// not use: when it has work again, its pass starts at the lowest pass of
// the triggers still backlogged, so idling banks no credit. The package
// does no I/O and keeps no clock: the dispatcher hands it the candidates
// (with what their holds allow) and the store reports what each ask took.
package fair

import (
	"math"

	touba "github.com/touba/touba-trigger"
)

// DefaultWeight is a trigger's weight when its program gives none.
const DefaultWeight = 10

// Candidate is a trigger that may have runnable entries this lease.
type Candidate struct {
	Ref    string
	Weight int
	// Limit bounds the runs it may start in this lease (what its first
	// binding's free slots allow, 0 behind an open circuit); negative is
	// no bound.
	Limit int
	// ByKey: its asks share its runs among its concurrency key's values
	// in turn (touba.LeaseAsk.ByKey).
	ByKey bool
}

// Scheduler keeps the triggers' passes from lease to lease. It is used
// by one leaser goroutine: not safe for concurrent use.
type Scheduler struct {
	shares map[string]*share
}

type share struct {
	pass float64
	// backlogged: at its last lease the trigger took all it asked for,
	// or was not asked (others came first): it still has work waiting.
	backlogged bool
}

// New returns a scheduler with no history.
func New() *Scheduler { return &Scheduler{shares: map[string]*share{}} }

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
}

// Plan starts a lease of at most free entries: first the holds' asks,
// in the order given (each cut to what is still free), then the
// candidates by weight. The Round it returns is the store's LeasePlan.
func (s *Scheduler) Plan(free int, holds []touba.LeaseAsk, cands []Candidate) *Round {
	r := &Round{s: s, free0: free, holds: holds}
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
		r.cands = append(r.cands, &entry{Candidate: c, sh: sh, step: 1 / float64(w), pass0: sh.pass})
	}
	r.Reset()
	return r
}

// Round is one lease's plan (touba.LeasePlan).
type Round struct {
	s     *Scheduler
	free0 int
	holds []touba.LeaseAsk
	cands []*entry

	free  int
	held  int // holds asked so far
	queue []*entry
	taken []touba.LeaseAsk // the asks answered, in order (for tests)
}

type entry struct {
	Candidate
	sh    *share
	step  float64 // 1/weight
	pass0 float64 // the pass at Plan, for Reset

	asked     int // queued, not yet answered
	took      int
	exhausted bool // an ask took less than it asked: nothing more runnable
}

var _ touba.LeasePlan = (*Round)(nil)

// Reset starts the round again, as if no ask had been answered.
func (r *Round) Reset() {
	r.free, r.held, r.queue, r.taken = r.free0, 0, r.queue[:0], r.taken[:0]
	for _, e := range r.cands {
		e.sh.pass, e.asked, e.took, e.exhausted = e.pass0, 0, 0, false
	}
}

// Next is the next ask of the lease.
func (r *Round) Next() (touba.LeaseAsk, bool) {
	for r.held < len(r.holds) {
		a := r.holds[r.held]
		r.held++
		if a.N = min(a.N, r.free); a.N > 0 {
			return a, true
		}
	}
	if len(r.queue) == 0 {
		r.allocate()
	}
	if len(r.queue) == 0 {
		return touba.LeaseAsk{}, false
	}
	e := r.queue[0]
	r.queue = r.queue[1:]
	return touba.LeaseAsk{TriggerRef: e.Ref, N: e.asked, ByKey: e.ByKey}, true
}

// Took records what an ask leased. A trigger's ask that took less than
// it asked had no more runnable entries: its unused runs are given back
// to its pass, and it is asked no more this round.
func (r *Round) Took(a touba.LeaseAsk, n int) {
	r.taken = append(r.taken, touba.LeaseAsk{TriggerRef: a.TriggerRef, Hold: a.Hold, N: n})
	r.free -= n
	if a.Hold != "" {
		return
	}
	for _, e := range r.cands {
		if e.Ref != a.TriggerRef || e.asked == 0 {
			continue
		}
		e.took += n
		if n < e.asked {
			e.exhausted = true
			e.sh.pass -= float64(e.asked-n) * e.step
		}
		e.asked = 0
		return
	}
}

// allocate gives the free workers, one at a time, to the candidate with
// the lowest pass among those that may take more, and queues one ask per
// candidate given any. It runs when the queue is empty: every earlier ask
// is answered.
func (r *Round) allocate() {
	r.queue = r.queue[:0]
	for budget := r.free; budget > 0; budget-- {
		var best *entry
		for _, e := range r.cands {
			if e.exhausted || e.Limit >= 0 && e.took+e.asked >= e.Limit {
				continue
			}
			if best == nil || e.sh.pass < best.sh.pass {
				best = e
			}
		}
		if best == nil {
			return
		}
		if best.asked == 0 {
			r.queue = append(r.queue, best)
		}
		best.asked++
		best.sh.pass += best.step
	}
}

// Done ends the round: what each candidate left decides how it starts
// the next one.
func (r *Round) Done() {
	for _, e := range r.cands {
		switch {
		case e.exhausted, e.Limit == 0:
			e.sh.backlogged = false
		default:
			// Took all it asked, or was never asked: work may be waiting.
			e.sh.backlogged = true
		}
	}
}

// Free is how many more entries the lease may take.
func (r *Round) Free() int { return r.free }

// Taken lists the asks answered so far and what each took.
func (r *Round) Taken() []touba.LeaseAsk { return r.taken }
