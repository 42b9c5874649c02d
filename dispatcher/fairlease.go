package dispatcher

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/fair"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/trigger"
)

// Fair dispatch (SPEC §2.1 dispatch, §2.2 "Holds take nothing"). With a
// store that plans leases (touba.FairQueue), each lease is one round of
// the fair scheduler (fair.PlanLease) over every trigger's work, fresh
// entries and runs handed back on a binding alike, by weight; a bounded
// binding's budget (its free slots less those promised, its due probe) is
// shared by the triggers that start on it, fresh or handed back, by
// weight too. A run that meets a full binding or an open circuit at a
// step is handed back (HoldRun) instead of waiting in its worker, and a
// lease asks for it at its trigger's turn once the binding frees: no
// worker and no lease is spent on a held run, and nothing polls it.

// holdsRefresh is how often the leaser reads the paused triggers and its
// triggers with leasable entries (what other nodes changed, and triggers
// the program no longer names), and, with a store other nodes share, the
// runs handed back.
const holdsRefresh = time.Second

// heldRecount is how often the leaser recounts the runs handed back when
// it is the only node of its store: it counts them itself meanwhile (each
// one it hands back, each one a lease takes, none left when an ask finds
// fewer than counted), so the store's count (its hold counts table, a few
// rows) is only a safety net.
const heldRecount = 30 * time.Second

// fairLease is the leaser's state for planned leases; only the leaser
// goroutine touches it, but held, which runs also move.
type fairLease struct {
	fq    touba.FairQueue
	sched *fair.Scheduler
	read  time.Time // when paused and others were last read
	// counted is when held was last read from the store.
	counted time.Time
	// others are triggers with leasable entries that the program does not
	// name (removed by a reload): leased like any other, so they end.
	others []string
	inUse  map[string]slotsRead // the cluster's slots in use, by binding
	// gated are the triggers whose first bound binding let none of their
	// runs start at the last lease, with why (touba.HeldSlot or
	// touba.HeldCircuit): their pending entries wait for it, unleased.
	gated atomic.Pointer[map[string]string]
	// paused are the paused triggers as last read (holdsRefresh), for
	// runs between two steps (pausedNow) and the plan.
	paused atomic.Pointer[map[string]bool]

	// stale asks the leaser to read again at its next lease, not
	// holdsRefresh after the last read: a pause changed on this node.
	stale atomic.Bool

	mu   sync.Mutex
	held map[string]map[string]int64 // runs handed back, by hold (binding ref) and trigger
	// handed counts the runs handed back on this node, so a lease knows
	// whether one was handed back while it ran (drained).
	handed int64
}

// PausesChanged tells the dispatcher that a trigger was paused or resumed
// through this node: it rereads the pauses before its next lease (other
// nodes see it within holdsRefresh), and a resumed trigger's entries are
// asked for at once.
func (d *Dispatcher) PausesChanged() {
	if d.fair != nil {
		d.fair.stale.Store(true)
	}
	d.Notify()
}

func (f *fairLease) addHeld(hold, ref string, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n > 0 {
		f.handed++
	}
	m := f.held[hold]
	if m == nil {
		m = map[string]int64{}
		f.held[hold] = m
	}
	if m[ref] += n; m[ref] <= 0 {
		delete(m, ref)
		if len(m) == 0 {
			delete(f.held, hold)
		}
	}
}

// drained forgets the runs counted on each (hold, trigger) of asks whose
// ask found fewer: none is left, unless a run was handed back since the
// lease began (handed moved past since), which the next ask finds.
func (f *fairLease) drained(asks []touba.LeaseAsk, since int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.handed != since {
		return
	}
	for _, a := range asks {
		if m := f.held[a.Hold]; m != nil {
			delete(m, a.TriggerRef)
			if len(m) == 0 {
				delete(f.held, a.Hold)
			}
		}
	}
}

// Held is the number of runs handed back on each binding, as this node
// last read or counted them, for metrics.
func (d *Dispatcher) Held() map[string]int64 {
	out := map[string]int64{}
	if d.fair == nil {
		return out
	}
	d.fair.mu.Lock()
	defer d.fair.mu.Unlock()
	for hold, m := range d.fair.held {
		for _, n := range m {
			out[hold] += n
		}
	}
	return out
}

// Gated lists the triggers whose runnable entries their first bound
// binding holds back, unleased, as of the last lease, with the reason
// (touba.HeldSlot or touba.HeldCircuit), for metrics and the console.
func (d *Dispatcher) Gated() map[string]string {
	if d.fair == nil {
		return nil
	}
	if g := d.fair.gated.Load(); g != nil {
		return *g
	}
	return nil
}

// pausedNow tells whether ref was paused at the last read (at most
// holdsRefresh old): a run between two steps then gives its worker back.
func (d *Dispatcher) pausedNow(ref string) bool {
	if d.fair == nil {
		return false
	}
	m := d.fair.paused.Load()
	return m != nil && (*m)[ref]
}

// gateReason says what holds b: its circuit when it is not closed.
func (d *Dispatcher) gateReason(b *Binding) string {
	if c := d.circuits.of(b); c != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.state.State != touba.CircuitClosed {
			return touba.HeldCircuit
		}
	}
	return touba.HeldSlot
}

// lease takes up to free entries: planned when the store can.
func (d *Dispatcher) lease(free int) ([]*touba.Delivery, []*reservation, error) {
	f := d.fair
	if f == nil {
		entries, err := d.queue.Lease(d.runCtx, free)
		return entries, nil, err
	}
	d.refreshFair()
	cfg := d.cfg.Load()
	l := fair.Lease{Free: free, Budgets: map[string]int{}, Held: map[string]map[string]int64{}}
	if p := f.paused.Load(); p != nil {
		l.Paused = *p
	}
	budget := func(ref string) {
		if _, ok := l.Budgets[ref]; ok {
			return
		}
		if can := d.passable(cfg.Bindings[ref]); can >= 0 {
			l.Budgets[ref] = can
		}
	}
	f.mu.Lock()
	since := f.handed
	for hold, m := range f.held {
		l.Held[hold] = maps.Clone(m)
	}
	f.mu.Unlock()
	for hold := range l.Held {
		budget(hold)
	}
	gated := map[string]string{}
	gates := map[string]*Binding{} // each trigger's gate, for the reservations below
	for _, t := range cfg.Program.Triggers {
		ft := fair.Trigger{Ref: t.Ref, Weight: t.Weight,
			ByKey: t.Concurrency != nil && t.Concurrency.Max > 1} // with max 1, oldest first is in turn already
		if b := d.gate(cfg, t.Ref); b != nil {
			gates[t.Ref], ft.Gate = b, b.Ref
			budget(b.Ref)
			if n, ok := l.Budgets[b.Ref]; ok && n == 0 && !l.Paused[t.Ref] {
				gated[t.Ref] = d.gateReason(b)
			}
		}
		l.Triggers = append(l.Triggers, ft)
	}
	for _, ref := range f.others {
		l.Triggers = append(l.Triggers, fair.Trigger{Ref: ref, Weight: trigger.DefaultWeight})
	}
	f.gated.Store(&gated)
	round := f.sched.PlanLease(l)
	entries, err := f.fq.LeasePlanned(d.runCtx, round)
	if err != nil {
		return nil, nil, err
	}
	round.Done()
	// The entries come in the order of the asks: each gets the
	// reservation of the binding its ask was bounded by.
	res := make([]*reservation, len(entries))
	i := 0
	for _, a := range round.Taken() {
		var b *Binding
		if a.Hold == touba.HoldTakeOver {
			b = nil
		} else if a.Hold != "" {
			if a.N > 0 {
				crashpoint.Hit(CrashAfterHeldLeased)
			}
			f.addHeld(a.Hold, a.TriggerRef, -int64(a.N))
			b = cfg.Bindings[a.Hold]
		} else {
			b = gates[a.TriggerRef]
		}
		for j := 0; j < a.N && i < len(entries); j++ {
			res[i] = d.reserve(b, entries[i].QueueID)
			i++
		}
	}
	f.drained(round.Drained(), since)
	return entries, res, nil
}

// refreshFair reads, at most every holdsRefresh, the paused triggers and
// the triggers with leasable entries the program does not name, and the
// runs handed back: every holdsRefresh with a store other nodes share,
// every heldRecount when this node alone hands runs back, and at once
// after a pause or resume through this node.
func (d *Dispatcher) refreshFair() {
	f := d.fair
	stale := f.stale.Swap(false)
	if !stale && time.Since(f.read) < holdsRefresh {
		return
	}
	f.read = time.Now()
	ctx, cancel := context.WithTimeout(d.runCtx, wakeTimeout)
	defer cancel()
	if recount := heldRecount; stale || d.opts.Slots != nil || time.Since(f.counted) >= recount {
		f.mu.Lock()
		since := f.handed
		f.mu.Unlock()
		if held, err := f.fq.HeldRuns(ctx); err == nil {
			f.mu.Lock()
			// A run handed back while the count ran may be missing from
			// it: keep the larger of the two until the next count.
			if f.handed != since {
				for hold, m := range f.held {
					for ref, n := range m {
						if held[hold] == nil {
							held[hold] = map[string]int64{}
						}
						held[hold][ref] = max(held[hold][ref], n)
					}
				}
			}
			f.held = held
			f.counted = f.read
			f.mu.Unlock()
		} else {
			d.log.Warn().Err(err).Msg("cannot count the runs handed back on their bindings; retrying")
		}
	}
	if hs, ok := f.fq.(touba.HoldStore); ok {
		if ps, err := hs.PausedTriggers(ctx); err == nil {
			m := make(map[string]bool, len(ps))
			for _, p := range ps {
				m[p.TriggerRef] = true
			}
			f.paused.Store(&m)
		}
	}
	cfg := d.cfg.Load()
	if refs, err := f.fq.ReadyTriggers(ctx); err == nil {
		f.others = f.others[:0]
		for _, ref := range refs {
			if _, ok := cfg.trigger(ref); !ok {
				f.others = append(f.others, ref)
			}
		}
	} else {
		d.log.Warn().Err(err).Msg("cannot list the triggers with leasable entries; retrying")
	}
	f.sched.Forget(func(ref string) bool {
		_, ok := cfg.trigger(ref)
		return ok || slices.Contains(f.others, ref)
	})
}

// gate is the binding that bounds how many runs of trigger ref may start
// now: its first tool step's, when that binding has a max_concurrency or
// a circuit, or is a worker binding; nil when nothing bounds it.
func (d *Dispatcher) gate(cfg *Config, ref string) *Binding {
	t, ok := cfg.trigger(ref)
	if !ok {
		return nil
	}
	for _, st := range t.Steps {
		if st.Tool == "" {
			continue
		}
		b := cfg.Bindings[st.Tool]
		if b == nil || b.MaxConcurrency <= 0 && b.Circuit.MinCalls <= 0 && takerOf(b) == nil {
			return nil
		}
		return b
	}
	return nil
}

// passable is how many more calls of b may start now on this node: 0
// behind an open circuit (1 once its probe is due), else its free slots
// less those promised to runs leased and not yet at their call; negative
// when nothing bounds it. A binding gone from the configuration (a hold
// on it outlived a reload) bounds nothing.
func (d *Dispatcher) passable(b *Binding) int {
	if b == nil {
		return -1
	}
	bounded, n := false, 0
	if c := d.circuits.of(b); c != nil {
		ctx, cancel := context.WithTimeout(d.runCtx, time.Second)
		d.refreshShared(ctx, c)
		cancel()
		c.mu.Lock()
		st, due := c.state.State, !d.opts.Now().Before(c.state.Until)
		c.mu.Unlock()
		switch {
		case st == touba.CircuitOpen && due:
			bounded, n = true, 1-int(c.reserved.Load())
		case st != touba.CircuitClosed:
			return 0
		}
	}
	if s := d.slots.of(b); s != nil {
		free := s.max - len(s.ch)
		if used, ok := d.clusterSlots(b); ok {
			free = min(free, s.max-used)
		}
		if free -= int(s.reserved.Load()); !bounded || free < n {
			n = free
		}
		bounded = true
	}
	if t := takerOf(b); t != nil {
		// A worker binding's calls start only in a worker's room.
		if free := t.Free(); !bounded || free < n {
			n = free
		}
		bounded = true
	}
	if !bounded {
		return -1
	}
	return max(n, 0)
}
