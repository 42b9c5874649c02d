package sqlitex

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"github.com/touba/touba-trigger/internal/commit"
)

// Tx is a writer transaction. Its hot statements are prepared once on the
// writer connection and reused by every batch: the writer's CPU time is
// what delays the next fsync, and re-parsing SQL for every operation took
// the journal from about 5,000 down to about 3,100 transitions/s here.
type Tx struct {
	*sql.Tx
	stmts map[string]*sql.Stmt
	// bound are stmts bound to this transaction, made on first use: a
	// batch runs the same few statements for each of its operations, and
	// binding one (Tx.StmtContext) allocates and locks each time.
	bound map[string]*sql.Stmt
}

// stmt returns q's prepared statement bound to t, nil when q is not hot.
func (t *Tx) stmt(ctx context.Context, q string) *sql.Stmt {
	if s := t.bound[q]; s != nil {
		return s
	}
	s := t.stmts[q]
	if s == nil {
		return nil
	}
	if t.bound == nil {
		t.bound = make(map[string]*sql.Stmt, len(t.stmts))
	}
	b := t.Tx.StmtContext(ctx, s)
	t.bound[q] = b
	return b
}

// ExecContext runs q with its prepared statement when there is one.
func (t *Tx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if s := t.stmt(ctx, q); s != nil {
		return s.ExecContext(ctx, args...)
	}
	return t.Tx.ExecContext(ctx, q, args...)
}

// QueryRowContext runs q with its prepared statement when there is one.
func (t *Tx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if s := t.stmt(ctx, q); s != nil {
		return s.QueryRowContext(ctx, args...)
	}
	return t.Tx.QueryRowContext(ctx, q, args...)
}

// QueryContext runs q with its prepared statement when there is one.
func (t *Tx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if s := t.stmt(ctx, q); s != nil {
		return s.QueryContext(ctx, args...)
	}
	return t.Tx.QueryContext(ctx, q, args...)
}

// Writer is the group-commit writer of one SQLite file (commit.Writer on
// its writer connection).
type Writer struct {
	*commit.Writer[*Tx]
	b *backend
}

// NewWriter prepares hot (and the savepoint statements) on db, the
// file's writer connection, and starts its writer.
func NewWriter(ctx context.Context, db *sql.DB, hot []string, opts commit.Options) (*Writer, error) {
	b := &backend{db: db, stmts: make(map[string]*sql.Stmt, len(hot)+3)}
	for _, q := range append([]string{SavepointBegin, SavepointRollback, SavepointRelease}, hot...) {
		if b.stmts[q] != nil {
			continue
		}
		s, err := db.PrepareContext(ctx, q)
		if err != nil {
			b.closeStmts()
			return nil, fmt.Errorf("prepare statement: %w", err)
		}
		b.stmts[q] = s
	}
	return &Writer{Writer: commit.New[*Tx](b, opts), b: b}, nil
}

// Close runs what was submitted, stops the writer and frees its
// statements. Idempotent.
func (w *Writer) Close() {
	w.Writer.Close()
	w.b.once.Do(w.b.closeStmts)
}

type backend struct {
	db    *sql.DB
	stmts map[string]*sql.Stmt
	once  sync.Once
}

func (b *backend) closeStmts() {
	for _, s := range b.stmts {
		s.Close()
	}
}

func (b *backend) Begin(ctx context.Context) (*Tx, error) {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &Tx{Tx: tx, stmts: b.stmts}, nil
}

func (b *backend) Commit(_ context.Context, tx *Tx) error { return tx.Tx.Commit() }

func (b *backend) Rollback(tx *Tx) { _ = tx.Tx.Rollback() }

func (b *backend) Isolate(ctx context.Context, tx *Tx, fn func() error) (opErr, fatal error) {
	return Savepoint(ctx, tx, fn)
}
