package journal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

// maxBatch bounds one commit, so that one transaction never grows without
// limit under a flood; the next batch starts right after.
const maxBatch = 512

// Crash points inside the writer, for tests that kill the process between
// two durable steps (see Crashpoint).
const (
	CrashBeforeCommit = "journal.before_commit"
	CrashAfterCommit  = "journal.after_commit"
)

// txFunc is one transition: it runs inside the batch's transaction, under
// its own savepoint, and returns an error to undo only itself.
type txFunc func(ctx context.Context, tx *wtx) error

// wtx is the writer's transaction. Its statements are prepared once on the
// writer connection (at start, while the connection is free) and reused by
// every batch: the writer's CPU time is what delays the next fsync, and
// re-parsing SQL for every transition took BenchmarkFinishParallel from
// about 5,000 down to about 3,100 effects/s here.
type wtx struct {
	*sql.Tx
	stmts map[string]*sql.Stmt
}

// ExecContext runs q with its prepared statement when there is one.
func (t *wtx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if s := t.stmts[q]; s != nil {
		return t.Tx.StmtContext(ctx, s).ExecContext(ctx, args...)
	}
	return t.Tx.ExecContext(ctx, q, args...)
}

// QueryRowContext runs q with its prepared statement when there is one.
func (t *wtx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if s := t.stmts[q]; s != nil {
		return t.Tx.StmtContext(ctx, s).QueryRowContext(ctx, args...)
	}
	return t.Tx.QueryRowContext(ctx, q, args...)
}

type op struct {
	fn   txFunc
	done chan error
}

// writer is the one goroutine that writes the journal. Every transition
// waits in ops; the writer takes all that are waiting, runs them in one
// transaction (one fsync with synchronous=FULL), and only then answers each
// caller. Batching needs no timer: while one commit syncs, the next callers
// queue up and form the next batch.
type writer struct {
	j     *Journal
	ops   chan *op
	stmts map[string]*sql.Stmt // the hot statements, prepared at start
	mu    sync.RWMutex         // held for reading while sending; Close takes it to stop sends
	shut  bool
	done  chan struct{}

	commits     atomic.Uint64
	transitions atomic.Uint64
	failed      atomic.Uint64
	largest     atomic.Uint64
	pending     atomic.Int64
}

// Stats counts the writer's work since Open.
type Stats = touba.JournalStats

// Stats returns the writer's counters.
func (j *Journal) Stats() Stats {
	return Stats{
		Commits:      j.w.commits.Load(),
		Transitions:  j.w.transitions.Load(),
		Failed:       j.w.failed.Load(),
		LargestBatch: j.w.largest.Load(),
		Pending:      j.w.pending.Load(),
	}
}

// hotQueries are prepared once at start; see wtx.
var hotQueries = []string{qSavepoint, qRollbackTo, qRelease, qGetEffect, qInsertEvent, qInsertEffect,
	qPrepareAgain, qDispatch, qFinish}

const (
	qSavepoint  = sqlitex.SavepointBegin
	qRollbackTo = sqlitex.SavepointRollback
	qRelease    = sqlitex.SavepointRelease
)

func (w *writer) start(ctx context.Context, j *Journal) error {
	w.stmts = make(map[string]*sql.Stmt, len(hotQueries))
	for _, q := range hotQueries {
		s, err := j.db.Write.PrepareContext(ctx, q)
		if err != nil {
			w.closeStmts()
			return fmt.Errorf("prepare statement: %w", err)
		}
		w.stmts[q] = s
	}
	w.j = j
	w.ops = make(chan *op, maxBatch)
	w.done = make(chan struct{})
	go w.run()
	return nil
}

func (w *writer) closeStmts() {
	for _, s := range w.stmts {
		s.Close()
	}
}

// stop lets the writer finish what was submitted, then waits for it.
func (w *writer) stop() {
	w.mu.Lock()
	if !w.shut {
		w.shut = true
		close(w.ops)
	}
	w.mu.Unlock()
	<-w.done
}

// submit hands fn to the writer and waits until its batch is committed.
// The context bounds only the wait to be taken into a batch: once taken, a
// transition may commit, so the caller waits for the truth rather than
// return early and believe it failed.
func (w *writer) submit(ctx context.Context, fn txFunc) error {
	o := &op{fn: fn, done: make(chan error, 1)}
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
	return <-o.done
}

func (w *writer) run() {
	defer close(w.done)
	defer w.closeStmts()
	var batch []*op
	for first := range w.ops {
		batch = sqlitex.Gather(batch, first, w.ops, maxBatch)
		w.commit(batch)
	}
}

// commit runs a batch in one transaction. A transition's own error undoes
// only its savepoint and fails only its caller; an error of the
// transaction itself fails every caller of the batch.
func (w *writer) commit(batch []*op) {
	// No caller's context may cancel a transaction shared with others.
	ctx := context.Background()
	start := time.Now()
	errs := make([]error, len(batch))
	err := func() error {
		sqltx, err := w.j.db.Write.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		defer sqltx.Rollback()
		tx := &wtx{Tx: sqltx, stmts: w.stmts}
		for i, o := range batch {
			var fatal error
			if errs[i], fatal = sqlitex.Savepoint(ctx, tx, func() error { return o.fn(ctx, tx) }); fatal != nil {
				return fatal
			}
		}
		crashpoint.Hit(CrashBeforeCommit)
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		crashpoint.Hit(CrashAfterCommit)
		return nil
	}()
	if err != nil {
		err = fmt.Errorf("effect journal batch of %d: %w", len(batch), err)
		w.j.log.Error().Err(err).Msg("journal commit failed")
		for i := range errs {
			errs[i] = errors.Join(errs[i], err)
		}
	} else {
		w.commits.Add(1)
		if n := uint64(len(batch)); n > w.largest.Load() {
			w.largest.Store(n) // only this goroutine writes it
		}
		if w.j.onCmt != nil {
			w.j.onCmt(len(batch), time.Since(start))
		}
	}
	for i, o := range batch {
		if errs[i] != nil {
			w.failed.Add(1)
		} else {
			w.transitions.Add(1)
		}
		w.pending.Add(-1)
		o.done <- errs[i]
	}
}
