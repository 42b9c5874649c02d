package sqlitex

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
)

// ErrBatcherClosed is returned by Do after Close.
var ErrBatcherClosed = errors.New("batcher closed")

// Batcher is group commit for any write: one goroutine takes every waiting
// operation, runs them in one transaction (each under its own savepoint, so
// one failure undoes only its own writes), commits once, then answers each.
// Callers get durability at the cost of one fsync shared by the batch.
type Batcher struct {
	db       *sql.DB
	ops      chan *batchOp
	mu       sync.RWMutex
	closed   bool
	done     chan struct{}
	maxBatch int

	commits, nops atomic.Int64
}

// Stats returns how many commits ran and how many operations they held.
func (b *Batcher) Stats() (commits, ops int64) { return b.commits.Load(), b.nops.Load() }

type batchOp struct {
	fn    func(context.Context, *sql.Tx) error
	err   error
	ch    chan struct{}
	onErr func(error) // for Go: nobody waits on ch
}

// NewBatcher starts a batcher writing to db (the writer handle).
func NewBatcher(db *sql.DB, maxBatch int) *Batcher {
	if maxBatch <= 0 {
		maxBatch = 512
	}
	b := &Batcher{db: db, ops: make(chan *batchOp, 1024), done: make(chan struct{}), maxBatch: maxBatch}
	go b.run()
	return b
}

// Do runs fn in the next batch and returns once that batch committed (or
// failed). fn must not keep tx.
func (b *Batcher) Do(fn func(context.Context, *sql.Tx) error) error {
	op := &batchOp{fn: fn, ch: make(chan struct{})}
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return ErrBatcherClosed
	}
	b.ops <- op
	b.mu.RUnlock()
	<-op.ch
	return op.err
}

// Go runs fn in the next batch without waiting for it: for records whose
// loss in a crash is harmless. Operations keep their order, so a later Do
// commits after it. Errors go to onErr when set.
func (b *Batcher) Go(fn func(context.Context, *sql.Tx) error, onErr func(error)) {
	op := &batchOp{fn: fn, ch: make(chan struct{}), onErr: onErr}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		if onErr != nil {
			onErr(ErrBatcherClosed)
		}
		return
	}
	b.ops <- op
}

// Close runs what was submitted and stops. Idempotent.
func (b *Batcher) Close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.ops)
	}
	b.mu.Unlock()
	<-b.done
}

func (b *Batcher) run() {
	defer close(b.done)
	runtime.LockOSThread()
	batch := make([]*batchOp, 0, b.maxBatch)
	for op := range b.ops {
		batch = Gather(batch, op, b.ops, b.maxBatch)
		b.commit(batch)
	}
}

func (b *Batcher) commit(batch []*batchOp) {
	ctx := context.Background()
	err := InTx(ctx, b.db, func(tx *sql.Tx) error {
		for _, op := range batch {
			var fatal error
			if op.err, fatal = Savepoint(ctx, tx, func() error { return op.fn(ctx, tx) }); fatal != nil {
				return fatal
			}
		}
		return nil
	})
	b.commits.Add(1)
	b.nops.Add(int64(len(batch)))
	for _, op := range batch {
		if err != nil && op.err == nil {
			op.err = err
		}
		if op.err != nil && op.onErr != nil {
			op.onErr(op.err)
		}
		close(op.ch)
	}
}
