package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Tx is one batch of the writer. The transaction begins at the first
// statement, so a batch of intake deliveries alone needs no BEGIN: their
// one INSERT ... ON CONFLICT is sent at commit and, alone, commits itself
// (one round trip). Anything else in the batch runs in a real transaction
// with the deliveries' statement last, before COMMIT.
type Tx struct {
	pool *pgxpool.Pool
	b    *backend
	tx   txConn
	enq  []*enqueueOp
	// runs: the batch's run history rows, one INSERT at commit.
	runs []runRow
	// journal counts the batch's journal transitions, for metrics.
	journal int
	// spOpen: the last operation's savepoint is not released yet.
	spOpen bool
	// deferOK: an optimistic run, whose operations may defer their
	// statements (tx_deferred.go); d holds them.
	deferOK bool
	d       deferred
}

func (t *Tx) begin(ctx context.Context) error {
	if t.tx != nil {
		return nil
	}
	// READ COMMITTED and the server-side bounds (beginSQL).
	tx, err := t.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: t.b.begin})
	if err != nil {
		return err
	}
	t.tx = tx
	return nil
}

// Exec runs a statement in the batch's transaction.
func (t *Tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.flushFirst(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	if err := t.begin(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.tx.Exec(ctx, sql, args...)
}

// Query runs a query in the batch's transaction.
func (t *Tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.flushFirst(ctx); err != nil {
		return nil, err
	}
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.tx.Query(ctx, sql, args...)
}

// QueryRow runs a one-row query in the batch's transaction.
func (t *Tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.flushFirst(ctx); err != nil {
		return errRow{err}
	}
	if err := t.begin(ctx); err != nil {
		return errRow{err}
	}
	return t.tx.QueryRow(ctx, sql, args...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// backend is internal/commit's view of the pool.
type backend struct {
	pool    *pgxpool.Pool
	now     func() string
	begin   string        // beginSQL
	set     string        // setLocal behind a pooler; "" when the session has the bounds
	timeout time.Duration // a rollback's bound
	dc      *deferCounts  // what flushes took (tx_deferred.go)
	hot     *hotLeaves    // the time partitions a flush may name (hot_leaves.go)
}

// Batch runs fn on a transaction begun when its first statement needs it
// (intake's enqueues of a batch are one statement at the end, with or
// without one), then commits; it rolls back when fn fails.
func (b backend) Batch(ctx context.Context, fn func(*Tx) error) error {
	t := &Tx{pool: b.pool, b: &b}
	if err := fn(t); err != nil {
		b.rollback(t)
		return err
	}
	if err := b.commit(ctx, t); err != nil {
		b.rollback(t)
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func (b backend) commit(ctx context.Context, t *Tx) error {
	if len(t.enq) > 0 && (len(t.runs) > 0 || slices.ContainsFunc(t.enq, func(o *enqueueOp) bool { return o.d.EventID != "" || o.batchRoutes })) {
		// Two statements: one transaction, so that no delivery commits
		// in a batch that then fails, nor an entry without its routes';
		// and the identities' locks (queue_identity.go) last until COMMIT.
		if err := t.begin(ctx); err != nil {
			return err
		}
	}
	if len(t.enq) > 0 {
		if err := flushEnqueues(ctx, b.querier(t), t.enq, b.now()); err != nil {
			return err
		}
	}
	if len(t.runs) > 0 {
		if err := flushRuns(ctx, b.querier(t), t.runs); err != nil {
			return err
		}
	}
	if t.tx == nil {
		return nil
	}
	return t.tx.Commit(ctx)
}

// querier is where commit's statements go: t's transaction when it has
// one, else one implicit transaction (with the bounds behind a pooler).
func (b backend) querier(t *Tx) querier {
	if t.tx != nil {
		return t.tx
	}
	if b.set != "" {
		return implicitTx{pool: b.pool, set: b.set}
	}
	return b.pool
}

func (b backend) rollback(t *Tx) {
	if t.tx != nil {
		ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
		defer cancel()
		t.tx.Rollback(ctx)
	}
}

// Isolate runs fn under a savepoint: its error undoes only its writes.
// The savepoint of an operation that succeeded is released with the next
// operation's SAVEPOINT, in the same round trip (or by COMMIT), and an
// undone one in one round trip too: each round trip is a wait on the
// database, in the one goroutine that commits for many callers.
func (b backend) Isolate(ctx context.Context, t *Tx, fn func() error) (opErr, fatal error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	sp := `SAVEPOINT op`
	if t.spOpen {
		sp = `RELEASE SAVEPOINT op; SAVEPOINT op`
	}
	// No arguments: pgx sends it by the simple protocol, which takes
	// several statements in one message.
	if _, err := t.tx.Exec(ctx, sp); err != nil {
		return nil, fmt.Errorf("savepoint: %w", err)
	}
	t.spOpen = true
	if opErr = fn(); opErr != nil {
		if _, err := t.tx.Exec(ctx, `ROLLBACK TO SAVEPOINT op; RELEASE SAVEPOINT op`); err != nil {
			return opErr, fmt.Errorf("rollback to savepoint: %w", err)
		}
		t.spOpen = false
	}
	return opErr, nil
}

// querier is a pool, a connection or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
