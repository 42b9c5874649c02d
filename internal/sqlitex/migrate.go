package sqlitex

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"time"

	"github.com/touba/touba-trigger/internal/schemacompat"
)

// Migrate applies, in name order, every *.sql file of dir in fsys that the
// schema_migrations table does not list yet, each in its own transaction
// together with its record, so a crash never leaves half a migration. It
// first refuses (SchemaTooNew) a file whose recorded oldest-compatible
// level is past this binary's newest migration, and records the level the
// migrations declare (compat.go).
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
	bases := baseNames(names)
	if err := checkCompat(ctx, db.Write, db.Path, bases); err != nil {
		return err
	}
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
		declared, err := schemacompat.Declared(base, string(body))
		if err != nil {
			return fmt.Errorf("migrate %s: %w", db.Path, err)
		}
		err = InTx(ctx, db.Write, func(tx *sql.Tx) error {
			if declared != "" {
				// Before the migration's own changes, in its transaction:
				// no binary it excludes may start on them.
				if err := raiseCompat(ctx, tx, declared, schemacompat.Newest(bases)); err != nil {
					return err
				}
			}
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
	if err := recordCompat(ctx, db, fsys, names, bases); err != nil {
		return fmt.Errorf("migrate %s: oldest-compatible level: %w", db.Path, err)
	}
	return nil
}
