package dispatcher

import (
	"context"
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
)

// A run meets a hold at a step whose binding has no free max_concurrency
// slot or an open circuit. With a store that takes runs back (fair
// dispatch, fairlease.go), the run does not wait in its worker: tryAcquire
// answers at once, and the run is handed back (settle, HoldRun) with the
// binding as its hold, no attempt spent, nothing of the step written.

// tryAcquire takes b's circuit pass and slot for the run of e without
// waiting; a held verdict says which hold stopped it. own: the run holds
// a reservation of b (its lease was planned on b); without one it takes
// only a slot no leased run was promised.
func (d *Dispatcher) tryAcquire(ctx context.Context, b *Binding, e *touba.Delivery, own bool) (release func(), pass *circuitPass, v *verdict) {
	if t := takerOf(b); t != nil && !own && t.Free() <= 0 {
		return nil, nil, noWorker(b, "")
	}
	pass, ok := d.tryCircuit(ctx, b)
	if !ok {
		return nil, nil, &verdict{action: held, hold: b.Ref, code: touba.ECircuitOpen,
			message: fmt.Sprintf("the circuit of %s is open; the run waits for its probe", b.Ref)}
	}
	free, ok := d.trySlot(ctx, b, e, own)
	if !ok {
		pass.release()
		return nil, nil, &verdict{action: held, hold: b.Ref, code: touba.EBindingBusy,
			message: fmt.Sprintf("%s has all its %d max_concurrency slots in use; the run waits for one", b.Ref, b.MaxConcurrency)}
	}
	return func() {
		free()
		pass.release()
		if b.MaxConcurrency > 0 || b.Circuit.MinCalls > 0 {
			// A slot or a probe freed: runs handed back on b, or a trigger
			// whose lease b bounded, may go now.
			d.Notify()
		}
	}, pass, nil
}

// trySlot takes one of b's slots if one is free, on this node and, with
// a shared store, in the cluster; not one promised to a leased run unless
// own (the run is that leased run).
func (d *Dispatcher) trySlot(ctx context.Context, b *Binding, e *touba.Delivery, own bool) (release func(), ok bool) {
	s := d.slots.of(b)
	if s == nil {
		return func() {}, true
	}
	if !own && s.max-len(s.ch)-int(s.reserved.Load()) <= 0 {
		return nil, false
	}
	select {
	case s.ch <- struct{}{}:
	default:
		return nil, false
	}
	if d.opts.Slots == nil {
		return func() { <-s.ch }, true
	}
	slot, ok, err := d.opts.Slots.TakeSlot(ctx, b.Ref, b.MaxConcurrency, e.QueueID, e.LeaseToken)
	if err != nil || !ok {
		if err != nil && ctx.Err() == nil {
			d.log.Warn().Err(err).Str("tool_ref", b.Ref).Str("queue_id", e.QueueID).Msg("cannot take a binding slot; the run waits for one")
		}
		<-s.ch
		return nil, false
	}
	return d.releaseShared(b, s, slot, e), true
}

// tryCircuit passes b's circuit if it lets a call through now: closed,
// or open past open_ms with the probe not taken (this call probes).
func (d *Dispatcher) tryCircuit(ctx context.Context, b *Binding) (*circuitPass, bool) {
	c := d.circuits.of(b)
	if c == nil {
		return nil, true
	}
	d.refreshShared(ctx, c)
	c.mu.Lock()
	defer c.mu.Unlock()
	return d.enterCircuit(ctx, b, c)
}

// hold hands the run of e back on v's hold; with none (its trigger is
// paused) it goes back pending, due now, for the lease to take once the
// trigger resumes.
func (d *Dispatcher) hold(e *touba.Delivery, v *verdict) error {
	if v.hold == "" {
		return d.queue.Postpone(context.Background(), e.QueueID, e.LeaseToken, d.opts.Now(), v.code, v.message)
	}
	err := d.fair.fq.HoldRun(context.Background(), e.QueueID, e.LeaseToken, v.hold, v.code, v.message)
	if err == nil {
		crashpoint.Hit(CrashAfterHeld)
		d.fair.addHeld(v.hold, e.TriggerRef, 1)
	}
	return err
}
