package dispatcher

import (
	"context"
	"sync/atomic"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
)

// A waiting entry holds no goroutine: one loop per dispatcher ends the due
// waits. It sleeps until the store's NextWake, and never longer than
// wakeRecheck, so a wait begun on another node (PostgreSQL) or a clock
// that jumped is seen within a second; a wait begun on this node with an
// earlier time cuts the sleep short (wakeAt). Due entries go to pending
// in batches (Wake), then the leaser is woken to run them at once rather
// than at its next poll.

const (
	// wakeBatch bounds the entries one Wake moves (one transaction).
	wakeBatch = 1000
	// wakeRecheck bounds the loop's sleep: the time a sleep may be late by
	// when nothing on this node told the loop about it.
	wakeRecheck = time.Second
	// wakeIdle is the loop's pause when a due wake found nothing to end.
	wakeIdle = 50 * time.Millisecond
	// wakeTimeout bounds one store call of the loop.
	wakeTimeout = 10 * time.Second
)

// waker is the wake loop's state shared with the runs.
type waker struct {
	hint chan struct{} // a wait begun here may wake before target
	// target is when the loop wakes next (unix ns by Options.Now); 0
	// while it is reading NextWake, so a hint then is never dropped.
	target atomic.Int64
}

func (w *waker) init() { w.hint = make(chan struct{}, 1) }

// WakeAt tells the wake loop that something stored on this node (a
// gathering intake opened) wakes at t, so the loop does not sleep past it.
func (d *Dispatcher) WakeAt(t time.Time) { d.wakeAt(t) }

// wakeAt tells the loop that a wait stored on this node wakes at t.
func (d *Dispatcher) wakeAt(t time.Time) {
	if tg := d.waker.target.Load(); tg != 0 && t.UnixNano() >= tg {
		return
	}
	select {
	case d.waker.hint <- struct{}{}:
	default:
	}
}

func (d *Dispatcher) wakeLoop() {
	defer d.wg.Done()
	timer := time.NewTimer(wakeRecheck)
	defer timer.Stop()
	failures := 0
	for {
		d.waker.target.Store(0)
		ctx, cancel := context.WithTimeout(d.runCtx, wakeTimeout)
		at, ok, err := d.opts.Waits.NextWake(ctx)
		cancel()
		now := d.opts.Now()
		wait := wakeRecheck
		switch {
		case err != nil:
			failures++
			if failures == 1 || failures%60 == 0 {
				d.log.Error().Err(err).Int("failures", failures).Msg("cannot read the next wake time; retrying every second")
			}
		case ok && !at.After(now):
			failures = 0
			if d.wakeDue(now) > 0 {
				continue
			}
			// Due, yet nothing to wake (another node was first, or the
			// store failed): no spin, look again shortly.
			wait = wakeIdle
		case ok:
			failures = 0
			wait = min(wait, at.Sub(now))
		default:
			failures = 0
		}
		d.waker.target.Store(now.Add(wait).UnixNano())
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-d.waker.hint:
		case <-d.stop:
			return
		}
	}
}

// wakeDue moves every entry due at now to pending, a batch at a time, and
// wakes the leaser. It returns how many it woke.
func (d *Dispatcher) wakeDue(now time.Time) int64 {
	var total int64
	for {
		ctx, cancel := context.WithTimeout(d.runCtx, wakeTimeout)
		n, err := d.opts.Waits.Wake(ctx, now, wakeBatch)
		cancel()
		total += n
		if err != nil {
			d.log.Error().Err(err).Msg("cannot wake the due waiting entries; retrying")
			break
		}
		if n < wakeBatch {
			break
		}
	}
	if total > 0 {
		crashpoint.Hit(CrashAfterWake)
		d.log.Debug().Int64("woken", total).Msg("waiting entries woken")
		d.Notify()
	}
	return total + d.startDue(now)
}

// startDue starts every gathering due at now (SPEC §2.1 debounce, batch),
// a batch at a time, and wakes the leaser: each started carrier is
// pending. It returns how many it started.
func (d *Dispatcher) startDue(now time.Time) int64 {
	gs, ok := d.opts.Waits.(touba.GatherStore)
	if !ok {
		return 0
	}
	var total int64
	for {
		ctx, cancel := context.WithTimeout(d.runCtx, wakeTimeout)
		n, err := gs.StartDue(ctx, now, wakeBatch)
		cancel()
		total += n
		if err != nil {
			d.log.Error().Err(err).Msg("cannot start the due gatherings; retrying")
			break
		}
		if n < wakeBatch {
			break
		}
	}
	if total > 0 {
		crashpoint.Hit(CrashAfterGatherStarted)
		d.log.Debug().Int64("started", total).Msg("gatherings started")
		d.Notify()
	}
	return total
}
