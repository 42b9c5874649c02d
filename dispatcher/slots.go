package dispatcher

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	touba "github.com/touba/touba-trigger"
)

// A binding's max_concurrency (SPEC §2.2): at most that many of its calls
// in flight. A run waits for a slot before anything of the step is written
// or started, so the wait spends no attempt (the entry's was counted at
// lease; no effect is prepared) and the handler's timeout starts only once
// the call has its slot; the run's lease is renewed while it waits, as
// during the call.
//
// In one process (SQLite) the bound is a semaphore per binding. Nodes
// sharing a database (Options.Slots set) hold the bound in the database
// too: a run takes its node's semaphore first, so a node never polls the
// database for more slots than the bound, then one of the binding's slots
// in the store, which every node sees.

// slots is the semaphores of the bindings, by tool ref. They live in the
// dispatcher, not the configuration, so a reload that keeps a binding's
// bound keeps its semaphore and the calls in flight count against it.
type slots struct {
	mu  sync.Mutex
	sem map[string]*sem
}

type sem struct {
	max int
	ch  chan struct{}
	// reserved are the slots promised to runs leased for them and not yet
	// at their call (fairlease.go).
	reserved atomic.Int64
}

// of returns the semaphore of b, nil when b is not bounded. A changed
// bound gets a new semaphore; calls holding the old one release it.
func (s *slots) of(b *Binding) *sem {
	if b.MaxConcurrency <= 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sem == nil {
		s.sem = map[string]*sem{}
	}
	if x, ok := s.sem[b.Ref]; ok && x.max == b.MaxConcurrency {
		return x
	}
	x := &sem{max: b.MaxConcurrency, ch: make(chan struct{}, b.MaxConcurrency)}
	s.sem[b.Ref] = x
	return x
}

// acquire waits for a slot of b for the run of e; the release func gives
// it back. It ends early when ctx ends (the lease was lost) or the
// dispatcher stops leasing (shutdown), with ok false: the run then stops
// without a verdict on its step.
//
// The binding's circuit (circuit.go) is passed first, in the same wait:
// a run held by an open circuit takes no slot.
func (d *Dispatcher) acquire(ctx context.Context, b *Binding, e *touba.Delivery) (release func(), pass *circuitPass, ok bool) {
	waiting := false
	defer func() {
		if waiting {
			d.waiting.Add(-1)
		}
	}()
	pass, ok = d.passCircuit(ctx, b, &waiting)
	if !ok {
		return nil, nil, false
	}
	free, ok := d.slot(ctx, b, e, &waiting)
	if !ok {
		pass.release()
		return nil, nil, false
	}
	return func() { free(); pass.release() }, pass, true
}

// slot waits for one of b's max_concurrency slots.
func (d *Dispatcher) slot(ctx context.Context, b *Binding, e *touba.Delivery, w *bool) (release func(), ok bool) {
	s := d.slots.of(b)
	if s == nil {
		return func() {}, true
	}
	waiting := *w
	defer func() { *w = waiting }()
	select {
	case s.ch <- struct{}{}:
	default:
		waiting = true
		d.waiting.Add(1)
		select {
		case s.ch <- struct{}{}:
		case <-ctx.Done():
			return nil, false
		case <-d.stop:
			return nil, false
		}
	}
	if d.opts.Slots == nil {
		return func() { <-s.ch }, true
	}
	slot, ok := d.sharedSlot(ctx, b, e, &waiting)
	if !ok {
		<-s.ch
		return nil, false
	}
	return d.releaseShared(b, s, slot, e), true
}

// releaseShared gives back slot, b's slot in the store, and this node's
// semaphore s.
func (d *Dispatcher) releaseShared(b *Binding, s *sem, slot int, e *touba.Delivery) func() {
	return func() {
		if err := d.opts.Slots.ReleaseSlot(context.Background(), b.Ref, slot, e.QueueID, e.LeaseToken); err != nil {
			d.log.Warn().Err(err).Str("tool_ref", b.Ref).Str("queue_id", e.QueueID).
				Msg("cannot release a binding slot; it frees when the entry's lease ends")
		}
		<-s.ch
	}
}

// sharedSlot takes one of b's slots in the store, polling every
// PollInterval while all are held (by this node or others).
func (d *Dispatcher) sharedSlot(ctx context.Context, b *Binding, e *touba.Delivery, waiting *bool) (int, bool) {
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for {
		slot, ok, err := d.opts.Slots.TakeSlot(ctx, b.Ref, b.MaxConcurrency, e.QueueID, e.LeaseToken)
		if err == nil && ok {
			return slot, true
		}
		if err != nil && ctx.Err() == nil {
			d.log.Warn().Err(err).Str("tool_ref", b.Ref).Str("queue_id", e.QueueID).Msg("cannot take a binding slot; retrying")
		}
		if !*waiting {
			*waiting = true
			d.waiting.Add(1)
		}
		t.Reset(d.opts.PollInterval)
		select {
		case <-t.C:
		case <-ctx.Done():
			return 0, false
		case <-d.stop:
			return 0, false
		}
	}
}

// WaitingForSlot is the number of runs waiting for a binding's slot or
// circuit now,
// for metrics.
func (d *Dispatcher) WaitingForSlot() int64 { return d.waiting.Load() }
