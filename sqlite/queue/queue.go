// Package queue is the queue file: accepted deliveries, their identities and
// their states. Enqueue goes through one writer goroutine that commits many
// requests in one transaction and one fsync (group commit) and answers each
// only after its batch is on disk.
package queue

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/commit"
	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/internal/uuidv7"
)

//go:embed schema/*.sql
var schema embed.FS

// ErrClosed is returned by Enqueue once Close has begun.
var ErrClosed = touba.ErrClosed

// ErrFull is returned by Enqueue when --max-pending entries are pending.
var ErrFull = touba.ErrQueueFull

// Options tune a Queue. Zero values take the defaults.
type Options struct {
	MaxPending int64            // default 1,000,000
	MaxBatch   int              // most requests in one commit; default 1024
	Now        func() time.Time // default time.Now
	NewID      func() string    // default uuidv7.New
	// ReadOnly opens an existing file for reading only (the operator's
	// read-only commands with no daemon): no migration, no writer; every
	// change fails with sqlitex.ErrReadOnly.
	ReadOnly bool
}

// Queue is an open queue file.
type Queue struct {
	db   *sqlitex.DB
	opts Options

	w        *sqlitex.Writer
	pending  atomic.Int64
	paused   atomic.Int64 // paused triggers: Lease goes around them (holds.go)
	enqueued atomic.Int64
	// Touched by the writer goroutine only: how the batch being written
	// moves the pending count.
	batchAdded, batchMoved int64
	batchDone              int64  // entries stored done at once (an accepting trigger with no steps)
	batchNow               string // batchTime's cache
	closeOnce              sync.Once
	closeErr               error
}

// Open opens or creates the queue file at path and starts its writer.
func Open(ctx context.Context, path string, opts Options) (*Queue, error) {
	if opts.MaxPending <= 0 {
		opts.MaxPending = 1_000_000
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 1024
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.NewID == nil {
		opts.NewID = uuidv7.New
	}
	if opts.ReadOnly {
		return openReadOnly(ctx, path, opts)
	}
	db, err := sqlitex.Open(path)
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	if err := sqlitex.Migrate(ctx, db, schema, "schema"); err != nil {
		db.Close()
		return nil, fmt.Errorf("queue: %w", err)
	}
	q := &Queue{db: db, opts: opts}
	var n int64
	if err := db.Write.QueryRowContext(ctx, `SELECT COUNT(*) FROM entries WHERE status = 'pending'`).Scan(&n); err != nil {
		db.Close()
		return nil, fmt.Errorf("queue: count pending: %w", err)
	}
	q.pending.Store(n)
	if err := db.Write.QueryRowContext(ctx, `SELECT COUNT(*) FROM paused_triggers`).Scan(&n); err != nil {
		db.Close()
		return nil, fmt.Errorf("queue: count paused triggers: %w", err)
	}
	q.paused.Store(n)
	if q.w, err = sqlitex.NewWriter(ctx, db.Write, append([]string{qInsert, qFind, activeOfKey, qFinishUnkeyed, qFinish, qFailUnkeyed, qFail, qRetry, qPostpone, releaseNext, qLease,
		qLeaseTrigger, qLeaseByKey, qLeaseHold, qHoldRun},
		append(durableStmts, gatherStmts...)...), commit.Options{
		MaxBatch: opts.MaxBatch, Queue: 4096, LockThread: true, OnBatch: q.onBatch}); err != nil {
		db.Close()
		return nil, fmt.Errorf("queue: %w", err)
	}
	return q, nil
}

// Close stops accepting, commits what was already submitted, and closes
// the file. It is safe to call more than once.
func (q *Queue) Close() error {
	q.closeOnce.Do(func() {
		if q.w != nil {
			q.w.Close()
		}
		q.closeErr = q.db.Close()
	})
	return q.closeErr
}

// Pending returns the number of pending entries.
func (q *Queue) Pending() int64 { return q.pending.Load() }

// Path returns the file path.
func (q *Queue) Path() string { return q.db.Path }

// Ping checks that the file answers a write transaction, for /readyz.
func (q *Queue) Ping(ctx context.Context) error {
	return sqlitex.InTx(ctx, q.db.Write, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `SELECT 1`)
		return err
	})
}

func (q *Queue) now() string { return touba.FormatTime(q.opts.Now()) }

var _ touba.QueueStore = (*Queue)(nil)

// QueueStats returns a snapshot of the writer's counters.
func (q *Queue) QueueStats() touba.QueueStats {
	if q.w == nil {
		return touba.QueueStats{}
	}
	st := q.w.Stats()
	return touba.QueueStats{Commits: st.Commits, Enqueued: q.enqueued.Load(), Batched: st.Ops}
}

// openReadOnly is Open with opts.ReadOnly.
func openReadOnly(ctx context.Context, path string, opts Options) (*Queue, error) {
	db, err := sqlitex.OpenReadOnly(path)
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	if err := sqlitex.CheckMigrated(ctx, db, schema, "schema"); err != nil {
		db.Close()
		return nil, fmt.Errorf("queue: %w", err)
	}
	q := &Queue{db: db, opts: opts}
	var n int64
	if err := db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM entries WHERE status = 'pending'`).Scan(&n); err != nil {
		db.Close()
		return nil, fmt.Errorf("queue: count pending: %w", err)
	}
	q.pending.Store(n)
	return q, nil
}
