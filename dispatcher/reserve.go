package dispatcher

import (
	"context"
	"sync/atomic"
	"time"
)

// slotCounter is a shared slot store that can say how many of a
// binding's slots the cluster's live leases hold (postgres.Slots).
type slotCounter interface {
	SlotsInUse(ctx context.Context, toolRef string) (int, error)
}

// clusterSlots is how many of b's slots the cluster holds, read at most
// once a poll interval; ok false without a shared store (or when it does
// not answer: this node's semaphore alone bounds the lease then).
func (d *Dispatcher) clusterSlots(b *Binding) (int, bool) {
	sc, ok := d.opts.Slots.(slotCounter)
	if !ok {
		return 0, false
	}
	f := d.fair
	if u, ok := f.inUse[b.Ref]; ok && time.Since(u.at) < d.opts.PollInterval {
		return u.n, true
	}
	ctx, cancel := context.WithTimeout(d.runCtx, time.Second)
	defer cancel()
	n, err := sc.SlotsInUse(ctx, b.Ref)
	if err != nil {
		return 0, false
	}
	if f.inUse == nil {
		f.inUse = map[string]slotsRead{}
	}
	f.inUse[b.Ref] = slotsRead{n: n, at: time.Now()}
	return n, true
}

type slotsRead struct {
	n  int
	at time.Time
}

// reservation is a leased run's claim on one of its binding's free slots
// (or its due probe): the binding its ask was planned on, its gate or the
// one it was handed back on. It is held until the run reaches that
// binding's step or ends, so the next lease does not count the same slot
// free twice, and a run that reaches the binding without one (a later
// step it was not planned on) does not take a slot promised to another.
type reservation struct {
	ref     string
	sem     *sem
	circuit *circuit
	taker   taker
	queueID string // the run's entry, for taker
	done    atomic.Bool
	slots   atomic.Bool // sem and circuit released
}

func (d *Dispatcher) reserve(b *Binding, queueID string) *reservation {
	if b == nil {
		return nil
	}
	r := &reservation{ref: b.Ref, sem: d.slots.of(b), circuit: d.circuits.of(b), taker: takerOf(b), queueID: queueID}
	if r.taker != nil {
		r.taker.Reserve(queueID)
	}
	if r.sem != nil {
		r.sem.reserved.Add(1)
	}
	if r.circuit != nil {
		r.circuit.reserved.Add(1)
	}
	return r
}

// drop ends the reservation; idempotent, nil-safe.
func (r *reservation) drop() {
	if r == nil || !r.done.CompareAndSwap(false, true) {
		return
	}
	r.dropSlots()
	if r.taker != nil {
		r.taker.Unreserve(r.queueID)
	}
}

// dropSlots ends the reservation's slot and probe, not a worker
// binding's room: the run's call takes that over when it waits in the
// Hub; drop ends it otherwise. Idempotent, nil-safe.
func (r *reservation) dropSlots() {
	if r == nil || !r.slots.CompareAndSwap(false, true) {
		return
	}
	if r.sem != nil {
		r.sem.reserved.Add(-1)
	}
	if r.circuit != nil {
		r.circuit.reserved.Add(-1)
	}
}

type reservationKey struct{}

func withReservation(ctx context.Context, r *reservation) context.Context {
	if r == nil {
		return ctx
	}
	return context.WithValue(ctx, reservationKey{}, r)
}

func reservationOf(ctx context.Context) *reservation {
	r, _ := ctx.Value(reservationKey{}).(*reservation)
	return r
}
