package dispatcher

import (
	"context"
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
// store that plans leases (touba.FairQueue), each lease is a round of the
// fair scheduler: first the runs handed back on a binding that can take
// them again (a slot free, a probe due), then each trigger's share of the
// free workers by weight, each trigger bounded by what its first bound
// binding can start now. A run that still meets a full binding or an open
// circuit at a step is handed back (HoldRun) instead of waiting in its
// worker, and a lease asks for it once the binding frees: no worker and
// no lease is spent on a held run, and nothing polls it.

// holdsRefresh is how often the leaser reads the store's count of runs
// handed back and its triggers with leasable entries: what other nodes
// changed, and triggers the program no longer names.
const holdsRefresh = time.Second

// fairLease is the leaser's state for planned leases; only the leaser
// goroutine touches it, but held, which runs also move.
type fairLease struct {
	fq    touba.FairQueue
	sched *fair.Scheduler
	read  time.Time // when held and others were last read
	// others are triggers with leasable entries that the program does not
	// name (removed by a reload): leased like any other, so they end.
	others []string
	inUse  map[string]slotsRead // the cluster's slots in use, by binding
	// gated are the triggers whose first bound binding let none of their
	// runs start at the last lease, with why (touba.HeldSlot or
	// touba.HeldCircuit): their pending entries wait for it, unleased.
	gated atomic.Pointer[map[string]string]
	// paused are the paused triggers as last read (holdsRefresh), for
	// runs between two steps (pausedNow).
	paused atomic.Pointer[map[string]bool]

	// stale asks the leaser to read again at its next lease, not
	// holdsRefresh after the last read: a pause changed on this node.
	stale atomic.Bool

	mu   sync.Mutex
	held map[string]int64 // runs handed back, by hold (binding ref)
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

func (f *fairLease) addHeld(hold string, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held[hold] += n; f.held[hold] <= 0 {
		delete(f.held, hold)
	}
}

func (f *fairLease) heldOn(hold string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held[hold]
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
	for k, v := range d.fair.held {
		out[k] = v
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
	var holds []touba.LeaseAsk
	f.mu.Lock()
	for hold, n := range f.held {
		if n <= 0 {
			continue
		}
		if can := d.passable(cfg.Bindings[hold]); can != 0 {
			if can > 0 {
				n = min(n, int64(can))
			}
			holds = append(holds, touba.LeaseAsk{Hold: hold, N: int(n)})
		}
	}
	f.mu.Unlock()
	cands := make([]fair.Candidate, 0, len(cfg.Program.Triggers)+len(f.others))
	gated := map[string]string{}
	gates := map[string]*Binding{} // each trigger's gate, for the reservations below
	for _, t := range cfg.Program.Triggers {
		limit := -1
		if d.pausedNow(t.Ref) {
			// Not asked for while paused (the store skips it anyway; a
			// pause newer than the last read is the store's to see).
			cands = append(cands, fair.Candidate{Ref: t.Ref, Weight: t.Weight, Limit: 0})
			continue
		}
		if b := d.gate(cfg, t.Ref); b != nil {
			gates[t.Ref] = b
			if f.heldOn(b.Ref) > 0 {
				limit = 0 // the runs handed back on it go first
			} else {
				limit = d.passable(b)
			}
			if limit == 0 {
				gated[t.Ref] = d.gateReason(b)
			}
		}
		byKey := t.Concurrency != nil && t.Concurrency.Max > 1 // with max 1, oldest first is in turn already
		cands = append(cands, fair.Candidate{Ref: t.Ref, Weight: t.Weight, Limit: limit, ByKey: byKey})
	}
	for _, ref := range f.others {
		cands = append(cands, fair.Candidate{Ref: ref, Weight: trigger.DefaultWeight, Limit: -1})
	}
	f.gated.Store(&gated)
	round := f.sched.Plan(free, holds, cands)
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
			f.addHeld(a.Hold, -int64(a.N))
			b = cfg.Bindings[a.Hold]
		} else {
			b = gates[a.TriggerRef]
		}
		for j := 0; j < a.N && i < len(entries); j++ {
			res[i] = d.reserve(b)
			i++
		}
	}
	return entries, res, nil
}

// refreshFair reads, at most every holdsRefresh, the runs handed back
// (by any node) and the triggers with leasable entries the program does
// not name.
func (d *Dispatcher) refreshFair() {
	f := d.fair
	if !f.stale.Swap(false) && time.Since(f.read) < holdsRefresh {
		return
	}
	f.read = time.Now()
	ctx, cancel := context.WithTimeout(d.runCtx, wakeTimeout)
	defer cancel()
	if held, err := f.fq.HeldRuns(ctx); err == nil {
		f.mu.Lock()
		f.held = held
		f.mu.Unlock()
	} else {
		d.log.Warn().Err(err).Msg("cannot count the runs handed back on their bindings; retrying")
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
// a circuit; nil when nothing bounds it.
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
		if b == nil || b.MaxConcurrency <= 0 && b.Circuit.MinCalls <= 0 {
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
	if !bounded {
		return -1
	}
	return max(n, 0)
}
