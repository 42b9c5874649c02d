package sqlitex

import (
	"context"
	"database/sql"
	"fmt"
)

// Savepoint statements, exported so that a writer that prepares its hot
// statements can prepare these too.
const (
	SavepointBegin    = `SAVEPOINT op`
	SavepointRollback = `ROLLBACK TO op`
	SavepointRelease  = `RELEASE op`
)

// Execer runs one statement; *sql.Tx is one.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Savepoint runs fn under a savepoint of tx, so that one operation of a
// group commit can fail without undoing the others: fn's error undoes only
// its own writes and comes back as opErr. fatal is set when the savepoint
// could not be set, rolled back or released: SQLite then already rolled the
// whole transaction back (it does on SQLITE_FULL or an I/O error), the
// statements after it would each commit on their own, and the caller must
// fail its whole batch.
func Savepoint(ctx context.Context, tx Execer, fn func() error) (opErr, fatal error) {
	if _, err := tx.ExecContext(ctx, SavepointBegin); err != nil {
		return nil, fmt.Errorf("savepoint: %w", err)
	}
	if opErr = fn(); opErr != nil {
		if _, err := tx.ExecContext(ctx, SavepointRollback); err != nil {
			return nil, fmt.Errorf("after %v: rollback to savepoint: %w", opErr, err)
		}
	}
	if _, err := tx.ExecContext(ctx, SavepointRelease); err != nil {
		return nil, fmt.Errorf("release savepoint: %w", err)
	}
	return opErr, nil
}
