package dispatcher

import (
	"context"
	"sync"
)

// A binding's max_concurrency (SPEC §2.2): at most that many of its calls
// in flight across the workers. A run waits for a slot before anything of
// the step is written or started, so the wait spends no attempt (the
// entry's was counted at lease; no effect is prepared) and the handler's
// timeout starts only once the call has its slot.

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

// acquire waits for a slot of b; the release func gives it back. It ends
// early when ctx ends or the dispatcher stops leasing (shutdown), with
// ok false: the run then stops without a verdict on its step.
func (d *Dispatcher) acquire(ctx context.Context, b *Binding) (release func(), ok bool) {
	s := d.slots.of(b)
	if s == nil {
		return func() {}, true
	}
	select {
	case s.ch <- struct{}{}:
		return func() { <-s.ch }, true
	default:
	}
	d.waiting.Add(1)
	defer d.waiting.Add(-1)
	select {
	case s.ch <- struct{}{}:
		return func() { <-s.ch }, true
	case <-ctx.Done():
	case <-d.stop:
	}
	return nil, false
}

// WaitingForSlot is the number of runs waiting for a binding's slot now,
// for metrics.
func (d *Dispatcher) WaitingForSlot() int64 { return d.waiting.Load() }
