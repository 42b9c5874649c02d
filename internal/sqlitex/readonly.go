package sqlitex

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"sort"
	"strings"
)

// ErrSchemaBehind is returned by CheckMigrated when a file lacks migrations
// this build has: a read-only open cannot apply them.
var ErrSchemaBehind = errors.New("file's schema is older than this build")

// OpenReadOnly opens an existing SQLite file for reading only (SPEC §6: the
// operator's read-only commands with no daemon running): mode=ro and
// query_only on every connection, no migration, no checkpointer, so
// nothing this process does writes the database or its WAL. Write is a
// read-only connection as well, so a store's writer started on it fails
// every write with SQLITE_READONLY instead of changing the file. SQLite
// still maps the -shm index (creating it and an empty -wal when a clean
// stop removed them), which holds no data.
func OpenReadOnly(path string) (*DB, error) {
	q := url.Values{}
	q.Set("mode", "ro")
	q.Set("_busy_timeout", "10000")
	q.Set("_query_only", "1")
	q.Set("_txlock", "deferred")
	dsn := uri(path, q)
	w, err := sql.Open(readerDriver, dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s read-only: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	var mode string
	if err := w.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s read-only: %w", path, err)
	}
	r, err := sql.Open(readerDriver, dsn)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s read-only: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	return &DB{Path: path, Write: w, Read: r, stop: make(chan struct{}), readOnly: true}, nil
}

// ReadOnly reports whether db was opened with OpenReadOnly.
func (db *DB) ReadOnly() bool { return db.readOnly }

// CheckMigrated returns ErrSchemaBehind when a migration of fsys/dir is not
// recorded in db (a file last opened by an older build), and refuses
// (SchemaTooNew) a file that needs a newer build than this one.
func CheckMigrated(ctx context.Context, db *DB, fsys fs.FS, dir string) error {
	names, err := fs.Glob(fsys, dir+"/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	if err := checkCompat(ctx, db.Read, db.Path, baseNames(names)); err != nil {
		return err
	}
	for _, name := range names {
		base := name[strings.LastIndex(name, "/")+1:]
		var n int
		if err := db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE name = ?`, base).Scan(&n); err != nil {
			return fmt.Errorf("%s: %w (%v)", db.Path, ErrSchemaBehind, err)
		} else if n == 0 {
			return fmt.Errorf("%s: %w (%s not applied)", db.Path, ErrSchemaBehind, base)
		}
	}
	return nil
}

// ErrReadOnly is returned by a store opened read-only when asked to write.
var ErrReadOnly = errors.New("opened read-only: this command cannot change anything (a daemon, or a command that changes something, takes the journal lock)")
