// Package queue is the queue file: accepted deliveries, their identities and
// their states. Enqueue goes through one writer goroutine that commits many
// requests in one transaction and one fsync (group commit) and answers each
// only after its batch is on disk.
package queue

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/internal/uuidv7"
)

//go:embed schema/*.sql
var schema embed.FS

// ErrClosed is returned by Enqueue once Close has begun.
var ErrClosed = errors.New("queue closed")

// ErrFull is returned by Enqueue when --max-pending entries are pending.
var ErrFull = errors.New("queue at max pending")

// Options tune a Queue. Zero values take the defaults.
type Options struct {
	MaxPending int64            // default 1,000,000
	MaxBatch   int              // most requests in one commit; default 1024
	Now        func() time.Time // default time.Now
	NewID      func() string    // default uuidv7.New
}

// Queue is an open queue file.
type Queue struct {
	db   *sqlitex.DB
	opts Options

	insert  *sql.Stmt
	find    *sql.Stmt
	keyed   *sql.Stmt // activeOfKey
	reqs    chan *enqueueReq
	mu      sync.RWMutex // guards closed against sends on reqs
	closed  bool
	done    chan struct{}
	pending atomic.Int64
	stats   Stats
}

// Stats counts the writer's work, for metrics and benchmarks.
type Stats struct {
	Commits  atomic.Int64
	Enqueued atomic.Int64
	Batched  atomic.Int64 // requests handled in commits, so Batched/Commits is the mean batch
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
	db, err := sqlitex.Open(path)
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	if err := sqlitex.Migrate(ctx, db, schema, "schema"); err != nil {
		db.Close()
		return nil, fmt.Errorf("queue: %w", err)
	}
	q := &Queue{db: db, opts: opts, reqs: make(chan *enqueueReq, 4096), done: make(chan struct{})}
	var n int64
	if err := db.Write.QueryRowContext(ctx, `SELECT COUNT(*) FROM entries WHERE status = 'pending'`).Scan(&n); err != nil {
		db.Close()
		return nil, fmt.Errorf("queue: count pending: %w", err)
	}
	q.pending.Store(n)
	if q.insert, err = db.Write.PrepareContext(ctx, `INSERT INTO entries
		(queue_id, trigger_ref, event_id, digest, body, headers, remote_addr, received_at, status, updated_at, traceparent,
		 conc_key, conc_max, held)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, NULLIF(?, ''), ?, ?)
		ON CONFLICT (trigger_ref, event_id) WHERE event_id != '' DO NOTHING`); err != nil {
		db.Close()
		return nil, fmt.Errorf("queue: %w", err)
	}
	if q.find, err = db.Write.PrepareContext(ctx,
		`SELECT queue_id, digest, status FROM entries WHERE trigger_ref = ? AND event_id = ? AND event_id != ''`); err != nil {
		db.Close()
		return nil, fmt.Errorf("queue: %w", err)
	}
	if q.keyed, err = db.Write.PrepareContext(ctx, activeOfKey); err != nil {
		db.Close()
		return nil, fmt.Errorf("queue: %w", err)
	}
	go q.writer()
	return q, nil
}

// Close stops accepting, commits what was already submitted, and closes
// the file. It is safe to call more than once.
func (q *Queue) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	close(q.reqs)
	q.mu.Unlock()
	<-q.done
	q.insert.Close()
	q.find.Close()
	q.keyed.Close()
	return q.db.Close()
}

// Pending returns the number of pending entries.
func (q *Queue) Pending() int64 { return q.pending.Load() }

// Stats returns the writer's counters.
func (q *Queue) Stats() *Stats { return &q.stats }

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
