package sqlitex

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"time"
)

// Migrate applies, in name order, every *.sql file of dir in fsys that the
// schema_migrations table does not list yet, each in its own transaction
// together with its record, so a crash never leaves half a migration.
func Migrate(ctx context.Context, db *DB, fsys fs.FS, dir string) error {
	if _, err := db.Write.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		name TEXT PRIMARY KEY, applied_at TEXT NOT NULL) STRICT`); err != nil {
		return fmt.Errorf("migrate %s: %w", db.Path, err)
	}
	names, err := fs.Glob(fsys, dir+"/*.sql")
	if err != nil {
		return fmt.Errorf("migrate %s: %w", db.Path, err)
	}
	sort.Strings(names)
	for _, name := range names {
		base := name[strings.LastIndex(name, "/")+1:]
		var n int
		if err := db.Write.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE name = ?`, base).Scan(&n); err != nil {
			return fmt.Errorf("migrate %s: %w", db.Path, err)
		} else if n > 0 {
			continue
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return fmt.Errorf("migrate %s: %w", db.Path, err)
		}
		err = InTx(ctx, db.Write, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, string(body)); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)`,
				base, time.Now().UTC().Format("2006-01-02T15:04:05.000Z"))
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate %s: %s: %w", db.Path, base, err)
		}
	}
	return nil
}
