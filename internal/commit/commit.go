// Package commit is the one group-commit engine of the stores: a single
// writer goroutine takes every operation waiting for it, runs them in one
// transaction, commits once (one fsync, or one round trip), and only then
// answers each caller. The queue's enqueues, the journal's transitions, the
// run checkpoints and the delivery log all go through it, whatever the
// backend: a Backend says how to run a batch in one transaction and how to
// isolate one operation.
//
// Batching needs no timer: while one batch commits, the next callers queue
// up and form the next batch, so the commit itself is the linger. Before
// gathering, the writer yields once, so that goroutines already runnable
// (those its last commit answered, most of all) submit first and join.
package commit

import (
	"context"
	"errors"
	//PRUNED
	//PRUNED
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned for operations submitted after Close.
var ErrClosed = errors.New("writer closed")

// Backend is what the writer needs of a store's transactions.
type Backend[Tx any] interface {
	// Batch runs fn in one transaction and makes it durable (one fsync, or
	// one round trip) when fn returns nil; it rolls the transaction back
	// when fn fails. Once it returns nil, every operation of the batch may
	// be answered as done. A backend whose transaction lives only inside a
	// call (SQLite's runs on the driver connection database/sql lends to a
	// function) can keep it there.
	Batch(ctx context.Context, fn func(tx Tx) error) error
	// Isolate runs fn so that its error undoes only its own writes (a
	// savepoint). fatal means the transaction itself is gone: the whole
	// batch fails.
	Isolate(ctx context.Context, tx Tx, fn func() error) (opErr, fatal error)
}

// Deferrer is a Backend whose operations, in an optimistic run, may leave
// their statements to the end of the batch, where the backend runs those
// of one kind as one statement for many operations. Before the run's
// first operation the writer calls Optimistic; after its last, Flush. An
// error of Flush fails the run like an operation's error: the batch runs
// again, isolated, and there nothing may be deferred (the backend's Tx
// knows it was not told Optimistic), so an operation's error undoes only
// itself.
type Deferrer[Tx any] interface {
	Backend[Tx]
	Optimistic(tx Tx)
	Flush(ctx context.Context, tx Tx) error
}

// IsRefused tells whether err was marked by Refused.
func IsRefused(err error) bool {
	var r *refusal
	return errors.As(err, &r)
}

// Op is one operation of a batch. It must not keep tx.
type Op[Tx any] func(ctx context.Context, tx Tx) error

// Options configure a Writer. The zero value works.
type Options struct {
	// MaxBatch bounds one transaction, so that a flood never grows one
	// without limit; default 512.
	MaxBatch int
	// Queue is how many operations may wait for the writer; default MaxBatch.
	Queue int
	// LockThread gives the writer an OS thread of its own, so the OS shares
	// the CPU between it and the request threads instead of Go sharing one
	// thread between the writer and every request goroutine.
	LockThread bool
	// BeforeCommit and AfterCommit run around each commit: crash points.
	BeforeCommit, AfterCommit func()
	// OnBatch sees every batch: its size, how long it took and its error.
	OnBatch func(ops int, took time.Duration, err error)
	// Timeout bounds each batch, from its first statement to its commit
	// (a database that stopped answering fails the batch, not the writer
	// forever); 0: no bound.
	Timeout time.Duration
	// Optimistic runs a batch whose operations are all redo-safe (DoRedo,
	// GoRedo) without isolating them first: no savepoint per operation.
	// Should one of them fail with an error that is not Refused, the
	// transaction is rolled back whole and the batch run again from its
	// first operation, each isolated as Do isolates it, so its outcome is
	// that of the isolated batch: only the failed operation is undone.
	// A batch with any other operation is isolated from the start.
	Optimistic bool
}

// Stats counts a writer's work.
type Stats struct {
	Commits int64 // batches committed
	Ops     int64 // operations done (committed, without an error of their own)
	Failed  int64 // operations that failed (their own error, or their batch's)
	Largest int64 // most operations in one commit
	Pending int64 // operations submitted and not answered yet
	Redos   int64 // optimistic batches run again isolated (Options.Optimistic)
}

type op[Tx any] struct {
	ctx      context.Context // ended before the op is taken: it is not run
	fn       Op[Tx]
	isolated bool
	redo     bool // may be run again after its writes were rolled back (DoRedo)
	err      error
	done     chan struct{}
	onErr    func(error) // set by Go: nobody waits on done
}

// Writer is the group-commit writer of one store.
type Writer[Tx any] struct {
	b    Backend[Tx]
	opts Options
	ops  chan *op[Tx]
	mu   sync.RWMutex // held for reading while sending; Close takes it to stop sends
	shut bool
	done chan struct{}

	commits, nops, failed, largest, pending, redos atomic.Int64
}

// New starts a writer on b.
func New[Tx any](b Backend[Tx], opts Options) *Writer[Tx] {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 512
	}
	if opts.Queue <= 0 {
		opts.Queue = opts.MaxBatch
	}
	w := &Writer[Tx]{b: b, opts: opts, ops: make(chan *op[Tx], opts.Queue), done: make(chan struct{})}
	go w.run()
	return w
}

// Do runs fn in the next batch, isolated from the other operations, and
// returns once that batch committed (or failed). ctx bounds only the wait to
// be taken into a batch: once taken, fn may commit, so the caller waits for
// the truth rather than return early and believe it failed.
func (w *Writer[Tx]) Do(ctx context.Context, fn Op[Tx]) error {
	return w.submit(ctx, &op[Tx]{ctx: ctx, fn: fn, isolated: true, done: make(chan struct{})}, false)
}

// DoRedo is Do for an fn that may be run twice: once in a transaction
// rolled back whole (another operation of its batch failed), then again
// in the next (Options.Optimistic). fn must set every result it hands
// back on each run, and write nothing outside the transaction that a
// second run would not set right. In return its batch, when every
// operation in it is redo-safe, runs without a savepoint per operation.
// fn may return a Refused error when it wrote nothing: that fails only
// its caller without making the batch run again.
func (w *Writer[Tx]) DoRedo(ctx context.Context, fn Op[Tx]) error {
	return w.submit(ctx, &op[Tx]{ctx: ctx, fn: fn, isolated: true, redo: true, done: make(chan struct{})}, false)
}

// GoRedo is Go with DoRedo's rules for fn.
func (w *Writer[Tx]) GoRedo(fn Op[Tx], onErr func(error)) {
	w.goOp(&op[Tx]{fn: fn, isolated: true, redo: true, done: make(chan struct{}), onErr: onErr})
}

// DoShared is Do without isolation (no savepoint: two statements fewer per
// operation), for operations of one guarded statement. An error of fn fails
// its whole batch, unless fn marks it with Refused: fn's own error, which
// fails only its caller. fn may return a Refused error only when it wrote
// nothing: a guard that matched no row, or a statement that failed on its
// own (SQLite undoes a failed statement by itself). Any error after a
// write must be a plain one, which fails the batch, since nothing undoes
// that write but the rollback of the whole transaction.
func (w *Writer[Tx]) DoShared(ctx context.Context, fn Op[Tx]) error {
	return w.submit(ctx, &op[Tx]{ctx: ctx, fn: fn, done: make(chan struct{})}, false)
}

// TryShared is DoShared for a caller to whom "not known" is an answer:
// it stops waiting when ctx ends and returns ctx's error, though fn may
// still run and commit after. Intake answers that 503, never a success,
// and the sender's retry finds the entry by its identity if it did commit.
// fn must then not write to anything the caller reads after it returned.
func (w *Writer[Tx]) TryShared(ctx context.Context, fn Op[Tx]) error {
	return w.submit(ctx, &op[Tx]{ctx: ctx, fn: fn, done: make(chan struct{})}, true)
}

// Refused marks err as an operation's own error, for DoShared and GoShared:
// the operation wrote nothing, so its batch goes on without it. The caller
// gets err as it was (Refused(err) reads and unwraps as err). nil stays nil.
func Refused(err error) error {
	if err == nil {
		return nil
	}
	return &refusal{err}
}

type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// Go runs fn in the next batch without waiting for it: for records whose
// loss in a crash is harmless. Operations keep their order, so a later Do
// commits after it. Errors go to onErr when set.
func (w *Writer[Tx]) Go(fn Op[Tx], onErr func(error)) {
	w.goOp(&op[Tx]{fn: fn, isolated: true, done: make(chan struct{}), onErr: onErr})
}

// GoShared is Go without isolation, with DoShared's rules for fn's errors.
func (w *Writer[Tx]) GoShared(fn Op[Tx], onErr func(error)) {
	w.goOp(&op[Tx]{fn: fn, done: make(chan struct{}), onErr: onErr})
}

func (w *Writer[Tx]) goOp(o *op[Tx]) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.shut {
		if o.onErr != nil {
			o.onErr(ErrClosed)
		}
		return
	}
	w.pending.Add(1)
	w.ops <- o
}

func (w *Writer[Tx]) submit(ctx context.Context, o *op[Tx], giveUp bool) error {
	w.mu.RLock()
	if w.shut {
		w.mu.RUnlock()
		return ErrClosed
	}
	w.pending.Add(1)
	select {
	case w.ops <- o:
	case <-ctx.Done():
		w.pending.Add(-1)
		w.mu.RUnlock()
		return ctx.Err()
	}
	w.mu.RUnlock()
	if giveUp {
		select {
		case <-o.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	<-o.done
	return o.err
}

// Close runs what was submitted, then stops. Idempotent.
func (w *Writer[Tx]) Close() {
	w.mu.Lock()
	if !w.shut {
		w.shut = true
		close(w.ops)
	}
	w.mu.Unlock()
	<-w.done
}

// Stats returns the writer's counters.
func (w *Writer[Tx]) Stats() Stats {
	return Stats{Commits: w.commits.Load(), Ops: w.nops.Load(), Failed: w.failed.Load(),
		Largest: w.largest.Load(), Pending: w.pending.Load(), Redos: w.redos.Load()}
}
