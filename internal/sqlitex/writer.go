package sqlitex

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/touba/touba-trigger/internal/commit"
)

// Tx is a writer transaction. A batch runs on the writer connection's
// driver connection itself, not through database/sql: the writer's CPU time
// is what delays the next fsync, and database/sql's locking, argument
// conversion and result objects were about 60% of the Go side of every
// statement. Its hot statements are prepared once on that connection and
// reused by every batch (re-parsing SQL for every operation took the
// journal from about 5,000 down to about 3,100 transitions/s here).
//
// A Tx made by WrapTx runs on a *sql.Tx instead, for the code that writes
// outside the writer (start-up and close).
type Tx struct {
	conn  *sqlite3.SQLiteConn
	stmts map[string]driver.Stmt // hot statements prepared on conn
	sql   *sql.Tx
	// args is the arguments' buffer, reused by every statement of the
	// writer (one goroutine): the driver has bound them when it returns.
	args *[]driver.NamedValue
}

// WrapTx lets the operations written for the writer run in tx.
func WrapTx(tx *sql.Tx) *Tx { return &Tx{sql: tx} }

// ExecContext runs q.
func (t *Tx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if t.sql != nil {
		return t.sql.ExecContext(ctx, q, args...)
	}
	s, done, err := t.stmt(q)
	if err != nil {
		return nil, err
	}
	defer done()
	nv, err := t.namedValues(args)
	if err != nil {
		return nil, err
	}
	return s.(driver.StmtExecContext).ExecContext(ctx, nv)
}

// QueryRowContext runs q for one row; its Scan says sql.ErrNoRows when
// there is none.
func (t *Tx) QueryRowContext(ctx context.Context, q string, args ...any) *Row {
	if t.sql != nil {
		return &Row{row: t.sql.QueryRowContext(ctx, q, args...)}
	}
	rows, err := t.QueryContext(ctx, q, args...)
	return &Row{rows: rows, err: err}
}

// QueryContext runs q.
func (t *Tx) QueryContext(ctx context.Context, q string, args ...any) (*Rows, error) {
	if t.sql != nil {
		rows, err := t.sql.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		return &Rows{sql: rows}, nil
	}
	s, done, err := t.stmt(q)
	if err != nil {
		return nil, err
	}
	nv, err := t.namedValues(args)
	if err != nil {
		done()
		return nil, err
	}
	dr, err := s.(driver.StmtQueryContext).QueryContext(ctx, nv)
	if err != nil {
		done()
		return nil, err
	}
	return &Rows{d: dr, done: done, vals: make([]driver.Value, len(dr.Columns()))}, nil
}

// stmt returns q prepared: the hot statement, or one prepared for this use
// alone (done finalizes it).
func (t *Tx) stmt(q string) (driver.Stmt, func(), error) {
	if s := t.stmts[q]; s != nil {
		return s, func() {}, nil
	}
	s, err := t.conn.Prepare(q)
	if err != nil {
		return nil, nil, err
	}
	return s, func() { s.Close() }, nil
}

// Writer is the group-commit writer of one SQLite file (commit.Writer on
// its writer connection).
type Writer struct {
	*commit.Writer[*Tx]
	b *backend
}

// NewWriter starts the writer of db, the file's writer connection, with
// hot (and the savepoint statements) prepared on its first batch.
func NewWriter(ctx context.Context, db *sql.DB, hot []string, opts commit.Options) (*Writer, error) {
	b := &backend{db: db, hot: append([]string{SavepointBegin, SavepointRollback, SavepointRelease}, hot...)}
	// Prepare them now, so that a statement that does not compile fails
	// here rather than in the first batch.
	if err := b.Batch(ctx, func(*Tx) error { return nil }); err != nil {
		b.closeStmts()
		return nil, err
	}
	return &Writer{Writer: commit.New[*Tx](b, opts), b: b}, nil
}

// Close runs what was submitted, stops the writer and frees its
// statements. Idempotent.
func (w *Writer) Close() {
	w.Writer.Close()
	w.b.once.Do(func() {
		// On the connection, as a batch would: nobody else may use it.
		c, err := w.b.db.Conn(context.Background())
		if err != nil {
			return // the pool is closed: so are the connection and its statements
		}
		defer c.Close()
		_ = c.Raw(func(any) error { w.b.closeStmts(); return nil })
	})
}

// backend runs each batch inside sql.Conn.Raw, on the driver connection
// database/sql lends for the duration of the call.
type backend struct {
	db   *sql.DB
	hot  []string
	once sync.Once

	// conn is the driver connection stmts were prepared on; a batch on
	// another one (database/sql replaced a broken connection) prepares
	// them again. Only the writer goroutine touches them.
	conn  *sqlite3.SQLiteConn
	stmts map[string]driver.Stmt
	args  []driver.NamedValue
}

// Batch runs fn in one IMMEDIATE transaction and commits it, or rolls it
// back when fn fails (commit.Backend).
func (b *backend) Batch(ctx context.Context, fn func(*Tx) error) error {
	c, err := b.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer c.Close()
	return c.Raw(func(dc any) error {
		conn, ok := dc.(*sqlite3.SQLiteConn)
		if !ok {
			return fmt.Errorf("begin: driver connection %T, want *sqlite3.SQLiteConn", dc)
		}
		if err := b.prepare(conn); err != nil {
			return err
		}
		if _, err := conn.Exec(`BEGIN IMMEDIATE`, nil); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		if err := fn(&Tx{conn: conn, stmts: b.stmts, args: &b.args}); err != nil {
			rollback(conn)
			return err
		}
		if _, err := conn.Exec(`COMMIT`, nil); err != nil {
			rollback(conn)
			return fmt.Errorf("commit: %w", err)
		}
		return nil
	})
}

// rollback ends the transaction if SQLite has not already (it rolls back
// by itself on SQLITE_FULL or an I/O error).
func rollback(conn *sqlite3.SQLiteConn) {
	if !conn.AutoCommit() {
		_, _ = conn.Exec(`ROLLBACK`, nil)
	}
}

func (b *backend) prepare(conn *sqlite3.SQLiteConn) error {
	if b.conn == conn {
		return nil
	}
	b.closeStmts()
	stmts := make(map[string]driver.Stmt, len(b.hot))
	for _, q := range b.hot {
		if stmts[q] != nil {
			continue
		}
		s, err := conn.Prepare(q)
		if err != nil {
			for _, s := range stmts {
				s.Close()
			}
			return fmt.Errorf("prepare statement: %w", err)
		}
		stmts[q] = s
	}
	b.conn, b.stmts = conn, stmts
	return nil
}

// closeStmts finalizes the hot statements. It runs when no batch does
// (before a batch prepares them again, or after the writer stopped).
func (b *backend) closeStmts() {
	for _, s := range b.stmts {
		s.Close()
	}
	b.conn, b.stmts = nil, nil
}

func (b *backend) Isolate(ctx context.Context, tx *Tx, fn func() error) (opErr, fatal error) {
	return Savepoint(ctx, tx, fn)
}
