package commit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	//PRUNED
	//PRUNED
	"time"
)

func (w *Writer[Tx]) run() {
	defer close(w.done)
	if w.opts.LockThread {
		runtime.LockOSThread()
	}
	batch := make([]*op[Tx], 0, w.opts.MaxBatch)
	for first := range w.ops {
		// The callers the last commit answered are runnable, not run: a
		// batch gathered now would hold the first of them alone, one
		// fsync for one op (with 256 dispatcher runs, 3 of 4 journal
		// commits were of one op). Yielding lets them submit first; with
		// nothing else runnable it returns at once.
		runtime.Gosched()
		batch = Gather(batch, first, w.ops, w.opts.MaxBatch)
		if batch = w.dropEnded(batch); len(batch) > 0 {
			w.commit(batch)
		}
	}
}

// dropEnded answers the operations whose caller's context ended while they
// waited to be taken (they were not run) and returns the others.
func (w *Writer[Tx]) dropEnded(batch []*op[Tx]) []*op[Tx] {
	keep := batch[:0]
	for _, o := range batch {
		if o.ctx == nil || o.ctx.Err() == nil {
			keep = append(keep, o)
			continue
		}
		o.err = o.ctx.Err()
		w.failed.Add(1)
		if o.onErr != nil {
			o.onErr(o.err)
		}
		w.pending.Add(-1)
		close(o.done)
	}
	return keep
}

// commit runs one batch in one transaction. An operation's own error undoes
// only itself and fails only its caller; an error of the transaction fails
// every operation of the batch: none of them may be reported done.
func (w *Writer[Tx]) commit(batch []*op[Tx]) {
	// No caller's context may cancel a transaction shared with others;
	// the batch's own bound may.
	ctx := context.Background()
	if w.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.opts.Timeout)
		defer cancel()
	}
	start := time.Now()
	err := w.run1(ctx, batch)
	if err != nil {
		err = fmt.Errorf("batch of %d: %w", len(batch), err)
	} else {
		w.commits.Add(1)
		if n := int64(len(batch)); n > w.largest.Load() {
			w.largest.Store(n) // only this goroutine writes it
		}
	}
	if w.opts.OnBatch != nil {
		w.opts.OnBatch(len(batch), time.Since(start), err)
	}
	for _, o := range batch {
		if err != nil {
			o.err = errors.Join(o.err, err)
		}
		if o.err != nil {
			w.failed.Add(1)
			if o.onErr != nil {
				o.onErr(o.err)
			}
		} else {
			w.nops.Add(1)
		}
		w.pending.Add(-1)
		close(o.done)
	}
}

// errRedo: an optimistic batch's operation failed; the batch is run again,
// isolated.
var errRedo = errors.New("an operation failed: the batch runs again, isolated")

func (w *Writer[Tx]) run1(ctx context.Context, batch []*op[Tx]) error {
	optimistic := w.opts.Optimistic
	for _, o := range batch {
		optimistic = optimistic && o.redo
	}
	err := w.b.Batch(ctx, func(tx Tx) error { return w.runOps(ctx, tx, batch, optimistic) })
	if optimistic && errors.Is(err, errRedo) {
		w.redos.Add(1)
		err = w.b.Batch(ctx, func(tx Tx) error { return w.runOps(ctx, tx, batch, false) })
	}
	if err != nil {
		return err
	}
	if w.opts.AfterCommit != nil {
		w.opts.AfterCommit()
	}
	return nil
}

// runOps runs the batch's operations in tx, then BeforeCommit: a non-nil
// error is the transaction's, and it must not commit.
// optimistic: no operation is isolated, and one that fails with an error
// not Refused ends the run with errRedo.
func (w *Writer[Tx]) runOps(ctx context.Context, tx Tx, batch []*op[Tx], optimistic bool) error {
	d, defers := w.b.(Deferrer[Tx])
	defers = defers && optimistic
	if defers {
		d.Optimistic(tx)
	}
	for _, o := range batch {
		o.err = nil
		if optimistic || !o.isolated {
			if err := o.fn(ctx, tx); err != nil {
				if !IsRefused(err) {
					if optimistic {
						return errRedo
					}
					return err
				}
				o.err = err // its own, and it wrote nothing: the batch goes on
			}
			continue
		}
		var fatal error
		if o.err, fatal = w.b.Isolate(ctx, tx, func() error { return o.fn(ctx, tx) }); fatal != nil {
			return fatal
		}
	}
	if defers {
		if err := d.Flush(ctx, tx); err != nil {
			return errRedo
		}
	}
	if w.opts.BeforeCommit != nil {
		w.opts.BeforeCommit()
	}
	return nil
}

// Gather appends first and then every value already waiting on ch to
// batch[:0], max in all: the batch of one group commit. It never waits, so
// the requests that arrive while a batch commits form the next one. It
// stops early when ch closes.
func Gather[T any](batch []T, first T, ch <-chan T, max int) []T {
	batch = append(batch[:0], first)
	for len(batch) < max {
		select {
		case v, ok := <-ch:
			if !ok {
				return batch
			}
			batch = append(batch, v)
		default:
			return batch
		}
	}
	return batch
}
