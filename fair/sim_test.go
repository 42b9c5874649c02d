package fair_test

import (
	"slices"
	"testing"
	"time"

	"github.com/touba/touba-trigger/fair"
)

// A simulated daemon on a simulated clock: a store of pending and
// handed-back entries, bindings with max_concurrency slots or a circuit,
// workers, and a leaser that plans every lease with fair.PlanLease, as the
// dispatcher does (dispatcher/fairlease.go). A run goes through its
// trigger's steps; at a bounded binding it takes a slot (its own
// reservation, or one nobody was promised) or is handed back on it, held,
// at that step; a call holds its worker and slot for the binding's call
// time; a step on an unbounded binding with no call time takes none.

const tick = 10 * time.Millisecond

type simBinding struct {
	slots     int           // max_concurrency, 0 for none
	circuit   bool          // has a circuit
	openUntil time.Duration // its circuit is open until then (closed after)
	call      time.Duration
	inUse     int
	reserved  int
}

func (b *simBinding) bounded() bool { return b.slots > 0 || b.circuit }

type simTrigger struct {
	ref    string
	weight int
	steps  []string // binding refs
}

type simEntry struct {
	id       int
	trig     *simTrigger
	step     int    // the step it is at (held: the step it was handed back at)
	hold     string // handed back on
	accepted time.Duration
	reserved string // running: the binding a slot was promised on
	callEnds time.Duration
	inCall   bool
}

type sim struct {
	t        *testing.T
	now      time.Duration
	workers  int
	triggers []*simTrigger
	bindings map[string]*simBinding
	paused   map[string]bool
	sched    *fair.Scheduler

	nextID  int
	fresh   map[string][]*simEntry // pending, never handed back, by trigger
	held    []*simEntry            // handed back, oldest (lowest id) first
	running []*simEntry
	done    map[string][]time.Duration       // per trigger, each done run's wait from acceptance
	calls   map[string]map[string]int        // binding -> trigger -> calls started
	doneAt  map[string]map[int]time.Duration // trigger -> id -> when done
}

func newSim(t *testing.T, workers int, bindings map[string]*simBinding, triggers ...*simTrigger) *sim {
	return &sim{t: t, workers: workers, triggers: triggers, bindings: bindings, paused: map[string]bool{},
		sched: fair.New(), fresh: map[string][]*simEntry{}, done: map[string][]time.Duration{},
		calls: map[string]map[string]int{}, doneAt: map[string]map[int]time.Duration{}}
}

func (s *sim) trigger(ref string) *simTrigger {
	for _, t := range s.triggers {
		if t.ref == ref {
			return t
		}
	}
	s.t.Fatalf("no trigger %s", ref)
	return nil
}

// post accepts n entries of ref now and returns their ids.
func (s *sim) post(ref string, n int) []int {
	t := s.trigger(ref)
	var ids []int
	for range n {
		s.nextID++
		s.fresh[ref] = append(s.fresh[ref], &simEntry{id: s.nextID, trig: t, accepted: s.now})
		ids = append(ids, s.nextID)
	}
	return ids
}

// heldOf counts the runs handed back, by hold and trigger (HeldRuns).
func (s *sim) heldOf() map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for _, e := range s.held {
		if out[e.hold] == nil {
			out[e.hold] = map[string]int64{}
		}
		out[e.hold][e.trig.ref]++
	}
	return out
}

func (s *sim) heldCount(hold, ref string) int { return int(s.heldOf()[hold][ref]) }

// lease plans one lease as the dispatcher does and answers its asks as
// the store does; the entries leased start at once.
func (s *sim) lease() {
	free := s.workers - len(s.running)
	if free <= 0 {
		return
	}
	l := fair.Lease{Free: free, Budgets: map[string]int{}, Held: s.heldOf(), Paused: s.paused}
	for ref, b := range s.bindings {
		if !b.bounded() {
			continue
		}
		n := 1 << 30
		if b.slots > 0 {
			n = b.slots - b.inUse - b.reserved
		}
		if b.circuit && s.now < b.openUntil {
			n = 0
		}
		if n < 1<<30 {
			l.Budgets[ref] = max(n, 0)
		}
	}
	for _, t := range s.triggers {
		gate := ""
		for _, st := range t.steps {
			if s.bindings[st].bounded() {
				gate = st
			}
			break
		}
		l.Triggers = append(l.Triggers, fair.Trigger{Ref: t.ref, Weight: t.weight, Gate: gate})
	}
	r := s.sched.PlanLease(l)
	var leased []*simEntry
	for a, ok := r.Next(); ok; a, ok = r.Next() {
		var got []*simEntry
		var reserve string
		switch {
		case a.Hold != "":
			reserve = a.Hold
			kept := s.held[:0]
			for _, e := range s.held {
				if len(got) < a.N && e.hold == a.Hold && (a.TriggerRef == "" || e.trig.ref == a.TriggerRef) && !s.paused[e.trig.ref] {
					got = append(got, e)
					continue
				}
				kept = append(kept, e)
			}
			s.held = kept
		case !s.paused[a.TriggerRef]:
			q := s.fresh[a.TriggerRef]
			n := min(a.N, len(q))
			got, s.fresh[a.TriggerRef] = q[:n:n], q[n:]
			for _, st := range s.trigger(a.TriggerRef).steps {
				if s.bindings[st].bounded() {
					reserve = st
				}
				break
			}
		}
		for _, e := range got {
			e.hold, e.reserved = "", reserve
			if reserve != "" {
				s.bindings[reserve].reserved++
			}
		}
		leased = append(leased, got...)
		r.Took(a, len(got))
	}
	r.Done()
	for _, e := range leased {
		s.running = append(s.running, e)
		s.advance(e)
	}
}

func (s *sim) unreserve(e *simEntry) {
	if e.reserved != "" {
		s.bindings[e.reserved].reserved--
		e.reserved = ""
	}
}

// advance runs e's steps from its current one until a call, a hold or
// its end.
func (s *sim) advance(e *simEntry) {
	for ; e.step < len(e.trig.steps); e.step++ {
		ref := e.trig.steps[e.step]
		b := s.bindings[ref]
		if b.bounded() {
			own := e.reserved == ref
			free := b.slots - b.inUse
			if !own {
				free -= b.reserved
			}
			if b.circuit && s.now < b.openUntil || b.slots > 0 && free <= 0 {
				s.unreserve(e)
				e.hold = ref
				s.running = slices.DeleteFunc(s.running, func(x *simEntry) bool { return x == e })
				i, _ := slices.BinarySearchFunc(s.held, e.id, func(x *simEntry, id int) int { return x.id - id })
				s.held = slices.Insert(s.held, i, e)
				return
			}
			if own {
				s.unreserve(e)
			}
		}
		if s.calls[ref] == nil {
			s.calls[ref] = map[string]int{}
		}
		s.calls[ref][e.trig.ref]++
		if b.call > 0 {
			b.inUse++
			e.inCall, e.callEnds = true, s.now+b.call
			return
		}
	}
	s.unreserve(e)
	s.running = slices.DeleteFunc(s.running, func(x *simEntry) bool { return x == e })
	s.done[e.trig.ref] = append(s.done[e.trig.ref], s.now-e.accepted)
	if s.doneAt[e.trig.ref] == nil {
		s.doneAt[e.trig.ref] = map[int]time.Duration{}
	}
	s.doneAt[e.trig.ref][e.id] = s.now
}

// step advances the clock by one tick: calls that end free their slot
// and go on to the next step; then one lease.
func (s *sim) step() {
	s.now += tick
	for _, e := range slices.Clone(s.running) {
		if e.inCall && e.callEnds <= s.now {
			s.bindings[e.trig.steps[e.step]].inUse--
			e.inCall = false
			e.step++
			s.advance(e)
		}
	}
	s.lease()
}

// until steps until cond holds or d has passed; it reports whether cond held.
func (s *sim) until(d time.Duration, cond func() bool) bool {
	end := s.now + d
	for s.now < end {
		if cond() {
			return true
		}
		s.step()
	}
	return cond()
}

// TestPausedHeldRunsCountForNobody: P calls a stub, then Remote
// (max_concurrency 2); A calls Remote first. P is paused with 42 of its
// runs handed back on Remote: those runs can run for nobody, so A's 5
// entries, posted then, are done at Remote's pace while P stays paused.
func TestPausedHeldRunsCountForNobody(t *testing.T) {
	s := newSim(t, 256, map[string]*simBinding{
		"stub":   {},
		"remote": {slots: 2, call: 100 * time.Millisecond},
	}, &simTrigger{ref: "p", weight: 10, steps: []string{"stub", "remote"}},
		&simTrigger{ref: "a", weight: 10, steps: []string{"remote"}})
	s.post("p", 50)
	if !s.until(10*time.Second, func() bool { return s.heldCount("remote", "p") >= 42 }) {
		t.Fatalf("P's runs handed back on remote: %d, want 42", s.heldCount("remote", "p"))
	}
	s.paused["p"] = true
	ids := s.post("a", 5)
	start := s.now
	s.until(10*time.Second, func() bool { return len(s.doneAt["a"]) == len(ids) })
	if got := len(s.doneAt["a"]); got != len(ids) {
		t.Fatalf("A's runs done %v after they were posted: %d of %d (P held on remote: %d, paused)",
			s.now-start, got, len(ids), s.heldCount("remote", "p"))
	}
	for _, w := range s.done["a"] {
		if w > 2*time.Second {
			t.Fatalf("A's runs waited %v, want each done within 2s", s.done["a"])
		}
	}
	if n := s.calls["remote"]["p"]; s.heldCount("remote", "p") < 42 || len(s.doneAt["p"]) > 50-42 {
		t.Fatalf("paused P went on: %d calls, %d done, %d still held", n, len(s.doneAt["p"]), s.heldCount("remote", "p"))
	}
}

// TestCircuitHeldBacklogGoesAtItsWeight: A calls a stub, then Remote,
// which has a circuit and no max_concurrency; 3,000 of A are handed back
// on its open circuit. When it closes, A's held runs are A's share of the
// workers, not all of them: B's 10 entries (equal weights), posted then,
// are each done within 2 s.
func TestCircuitHeldBacklogGoesAtItsWeight(t *testing.T) {
	s := newSim(t, 256, map[string]*simBinding{
		"stub":   {},
		"remote": {circuit: true, openUntil: 5 * time.Second, call: time.Second},
	}, &simTrigger{ref: "a", weight: 10, steps: []string{"stub", "remote"}},
		&simTrigger{ref: "b", weight: 10, steps: []string{"stub"}})
	s.post("a", 3000)
	if !s.until(5*time.Second, func() bool { return s.heldCount("remote", "a") == 3000 }) {
		t.Fatalf("A's runs handed back on the open circuit: %d, want 3000", s.heldCount("remote", "a"))
	}
	s.until(10*time.Second, func() bool { return s.now >= 5*time.Second })
	s.step() // the circuit closed: A's held runs go
	ids := s.post("b", 10)
	s.until(30*time.Second, func() bool { return len(s.doneAt["b"]) == len(ids) })
	if len(s.done["b"]) != len(ids) {
		t.Fatalf("B's runs done: %d of %d after %v", len(s.done["b"]), len(ids), s.now)
	}
	for _, w := range s.done["b"] {
		if w > 2*time.Second {
			t.Fatalf("B's runs waited %v, want each done within 2s (A's held left: %d)", s.done["b"], s.heldCount("remote", "a"))
		}
	}
}

// TestLaterStepBindingSharedByWeight: C calls a stub, then Remote
// (max_concurrency 2); A (weight 100) calls Remote first. Both are
// backlogged: Remote's calls go to A and C by their weights (10:1, ±20%
// over 10 s), not to C's handed-back runs first.
func TestLaterStepBindingSharedByWeight(t *testing.T) {
	s := newSim(t, 256, map[string]*simBinding{
		"stub":   {},
		"remote": {slots: 2, call: 50 * time.Millisecond},
	}, &simTrigger{ref: "c", weight: 10, steps: []string{"stub", "remote"}},
		&simTrigger{ref: "a", weight: 100, steps: []string{"remote"}})
	s.post("c", 2000)
	s.post("a", 2000)
	s.until(time.Second, func() bool { return false })
	a0, c0 := s.calls["remote"]["a"], s.calls["remote"]["c"]
	s.until(10*time.Second, func() bool { return false })
	da, dc := s.calls["remote"]["a"]-a0, s.calls["remote"]["c"]-c0
	t.Logf("in 10 s: A %d calls, C %d", da, dc)
	if dc == 0 || da == 0 {
		t.Fatalf("in 10 s: A %d calls, C %d; want both, 10:1", da, dc)
	}
	if ratio := float64(da) / float64(dc); ratio < 8 || ratio > 12 {
		t.Fatalf("A/C = %.2f (A %d, C %d), want 10 ±20%%", ratio, da, dc)
	}
}

// TestLaterStepBindingSharedWhileFed: as above, with C fed more than
// Remote can run (4 deliveries every 100 ms): its fresh runs, which reach
// Remote at their second step unplanned, take no slot promised to A, and
// A keeps its share for as long as C is fed.
func TestLaterStepBindingSharedWhileFed(t *testing.T) {
	s := newSim(t, 256, map[string]*simBinding{
		"stub":   {},
		"remote": {slots: 2, call: 50 * time.Millisecond},
	}, &simTrigger{ref: "c", weight: 10, steps: []string{"stub", "remote"}},
		&simTrigger{ref: "a", weight: 100, steps: []string{"remote"}})
	s.post("a", 2000)
	feed := func(d time.Duration) {
		end := s.now + d
		for s.now < end {
			if s.now%(100*time.Millisecond) == 0 {
				s.post("c", 4)
			}
			s.step()
		}
	}
	feed(time.Second)
	a0, c0 := s.calls["remote"]["a"], s.calls["remote"]["c"]
	feed(10 * time.Second)
	da, dc := s.calls["remote"]["a"]-a0, s.calls["remote"]["c"]-c0
	t.Logf("in 10 s: A %d calls, C %d (C held: %d)", da, dc, s.heldCount("remote", "c"))
	if dc == 0 || da == 0 {
		t.Fatalf("in 10 s: A %d calls, C %d; want both, 10:1", da, dc)
	}
	if ratio := float64(da) / float64(dc); ratio < 8 || ratio > 12 {
		t.Fatalf("A/C = %.2f (A %d, C %d), want 10 ±20%%", ratio, da, dc)
	}
}
