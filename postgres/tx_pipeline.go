package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// txConn is what a batch needs of its transaction: a pgx.Tx begun by its
// own round trip (Tx.begin), or a connTx begun inside the batch's first
// pipeline.
type txConn interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// connTx is a transaction whose BEGIN went out in the same pipeline as
// its first statements (pipelineBegin): a round trip fewer per batch, on
// the one goroutine that commits for many callers.
type connTx struct {
	c    *pgxpool.Conn
	done bool
}

func (x *connTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return x.c.Exec(ctx, sql, args...)
}

func (x *connTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return x.c.Query(ctx, sql, args...)
}

func (x *connTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return x.c.QueryRow(ctx, sql, args...)
}

func (x *connTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return x.c.SendBatch(ctx, b)
}

// errCommitRolledBack: the server answered COMMIT with ROLLBACK (the
// transaction had failed), as pgx.ErrTxCommitRollback.
var errCommitRolledBack = errors.New("commit unexpectedly resulted in rollback")

// Commit commits and gives the connection back. A COMMIT of a failed
// transaction is answered ROLLBACK without an error: that is a failure.
func (x *connTx) Commit(ctx context.Context) error {
	if x.done {
		return pgx.ErrTxClosed
	}
	x.done = true
	tag, err := x.c.Exec(ctx, `COMMIT`)
	x.release()
	if err == nil && tag.String() == "ROLLBACK" {
		err = errCommitRolledBack
	}
	return err
}

// Rollback rolls back and gives the connection back; after Commit it does
// nothing.
func (x *connTx) Rollback(ctx context.Context) error {
	if x.done {
		return pgx.ErrTxClosed
	}
	x.done = true
	_, err := x.c.Exec(ctx, `ROLLBACK`)
	x.release()
	return err
}

// release gives the connection back to the pool, which closes it rather
// than lend it again when it is still in a transaction (a COMMIT or
// ROLLBACK that failed on the way).
func (x *connTx) release() { x.c.Release() }

// pipelineBegin sends b as the batch's first statements with the
// transaction's BEGIN (and, behind a pooler, its bounds) ahead of them in
// the same pipeline; the caller reads b's answers from the results as if
// b had been sent alone.
func (t *Tx) pipelineBegin(ctx context.Context, b *pgx.Batch) (pgx.BatchResults, error) {
	c, err := t.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	t.tx = &connTx{c: c}
	heads := []string{beginRC}
	if t.b.set != "" {
		heads = append(heads, t.b.set)
	}
	return sendAfter(ctx, c, b, heads...)
}
