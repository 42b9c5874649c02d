package fair

import touba "github.com/touba/touba-trigger"

// Round is one lease's plan (touba.LeasePlan).
type Round struct {
	s       *Scheduler
	free0   int
	budget0 map[string]int
	cands   []*entry
	q0      []qpass

	free    int
	budget  map[string]int
	queue   []*source
	taken   []touba.LeaseAsk // the asks answered, in order
	drained []touba.LeaseAsk // the held runs' asks that took less than asked
}

type qpass struct {
	sh   *share
	pass float64
}

type entry struct {
	Candidate
	sh    *share
	step  float64 // 1/weight
	pass0 float64 // the pass at Plan, for Reset
	srcs  []*source
}

// source is one kind of a trigger's work: its runs handed back on a hold,
// or its fresh entries (hold "").
type source struct {
	e       *entry
	hold    string
	binding string // the binding it starts on ("" none)
	n       int    // bound on what it may take this lease; negative none
	q       *share // its trigger's share of binding, when bounded

	asked     int // queued, not yet answered
	took      int
	exhausted bool // an ask took less than it asked: nothing more runnable
}

var _ touba.LeasePlan = (*Round)(nil)

// Reset starts the round again, as if no ask had been answered.
func (r *Round) Reset() {
	r.free, r.queue, r.taken, r.drained = r.free0, r.queue[:0], r.taken[:0], r.drained[:0]
	r.budget = make(map[string]int, len(r.budget0))
	for b, n := range r.budget0 {
		r.budget[b] = n
	}
	for _, e := range r.cands {
		e.sh.pass = e.pass0
		for _, src := range e.srcs {
			src.asked, src.took, src.exhausted = 0, 0, false
		}
	}
	for _, q := range r.q0 {
		q.sh.pass = q.pass
	}
}

// Next is the next ask of the lease.
func (r *Round) Next() (touba.LeaseAsk, bool) {
	if len(r.queue) == 0 {
		r.allocate()
	}
	if len(r.queue) == 0 {
		return touba.LeaseAsk{}, false
	}
	src := r.queue[0]
	r.queue = r.queue[1:]
	return touba.LeaseAsk{TriggerRef: src.e.Ref, Hold: src.hold, N: src.asked, ByKey: src.e.ByKey && src.hold == ""}, true
}

// Took records what an ask leased. An ask that took less than it asked
// found no more runnable entries of its kind: its unused runs are given
// back to its passes and its binding's budget, and it is asked no more
// this round.
func (r *Round) Took(a touba.LeaseAsk, n int) {
	r.taken = append(r.taken, touba.LeaseAsk{TriggerRef: a.TriggerRef, Hold: a.Hold, N: n})
	r.free -= n
	if a.Hold == touba.HoldTakeOver {
		return
	}
	for _, e := range r.cands {
		if e.Ref != a.TriggerRef {
			continue
		}
		for _, src := range e.srcs {
			if src.hold != a.Hold || src.asked == 0 {
				continue
			}
			src.took += n
			if unused := src.asked - n; unused > 0 {
				src.exhausted = true
				e.sh.pass -= float64(unused) * e.step
				if src.q != nil {
					src.q.pass -= float64(unused) * e.step
					r.budget[src.binding] += unused
				}
				if src.hold != "" {
					r.drained = append(r.drained, touba.LeaseAsk{TriggerRef: e.Ref, Hold: src.hold})
				}
			}
			src.asked = 0
			return
		}
	}
}

// available tells whether src may be given one more run, whoever's turn
// it is on its binding.
func (r *Round) available(src *source) bool {
	if src.exhausted || src.n >= 0 && src.took+src.asked >= src.n {
		return false
	}
	return src.q == nil || r.budget[src.binding] > 0
}

// allocate gives the free workers, one at a time, to the candidate with
// the lowest pass among those that may take more, and queues one ask per
// source given any. A source on a bounded binding may take a run only at
// its trigger's turn there: the lowest pass on the binding among the
// triggers that may start a run on it. It runs when the queue is empty:
// every earlier ask is answered.
func (r *Round) allocate() {
	r.queue = r.queue[:0]
	for left := r.free; left > 0; left-- {
		turn := map[string]*share{}
		for _, e := range r.cands {
			for _, src := range e.srcs {
				if src.q == nil || !r.available(src) {
					continue
				}
				if t := turn[src.binding]; t == nil || src.q.pass < t.pass {
					turn[src.binding] = src.q
				}
			}
		}
		var best *entry
		var bestSrc *source
		for _, e := range r.cands {
			if best != nil && e.sh.pass >= best.sh.pass {
				continue
			}
			for _, src := range e.srcs {
				if r.available(src) && (src.q == nil || turn[src.binding] == src.q) {
					best, bestSrc = e, src
					break
				}
			}
		}
		if best == nil {
			return
		}
		if bestSrc.asked == 0 {
			r.queue = append(r.queue, bestSrc)
		}
		bestSrc.asked++
		best.sh.pass += best.step
		if bestSrc.q != nil {
			bestSrc.q.pass += best.step
			r.budget[bestSrc.binding]--
		}
	}
}

// Done ends the round: what each candidate left decides how it starts
// the next one. A trigger that could still take a run (only the workers
// ran out) keeps its pass; one with nothing runnable, or held back by its
// bindings' budgets, starts the next round at the backlogged triggers'
// lowest. On each bounded binding, a trigger whose runs there were not
// all taken keeps its pass, so the binding's budget goes by the weights
// from lease to lease.
func (r *Round) Done() {
	for _, e := range r.cands {
		e.sh.backlogged = false
		for _, src := range e.srcs {
			if r.available(src) {
				e.sh.backlogged = true
			}
			if src.q != nil {
				src.q.backlogged = false
			}
		}
	}
	for _, e := range r.cands {
		for _, src := range e.srcs {
			if src.q != nil && !src.exhausted && src.n != 0 {
				src.q.backlogged = true
			}
		}
	}
}

// Free is how many more entries the lease may take.
func (r *Round) Free() int { return r.free }

// Taken lists the asks answered so far and what each took.
func (r *Round) Taken() []touba.LeaseAsk { return r.taken }

// Drained lists the held runs' asks (TriggerRef, Hold) that found fewer
// runs than they asked: that trigger has no more runnable runs on that
// hold.
func (r *Round) Drained() []touba.LeaseAsk { return r.drained }
