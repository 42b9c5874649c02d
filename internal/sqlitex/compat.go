package sqlitex

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"strings"

	"github.com/touba/touba-trigger/internal/schemacompat"
)

// compatTable holds a file's oldest-compatible level (package
// schemacompat): a table of its own, as schema_migrations is, so that the
// three files record it alike whatever their own tables.
const compatTable = "schema_compat"

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// compatLevel is the level recorded in the file and the newest migration
// of the binary that recorded it; "" when none is (a file last written
// before levels were recorded, or new).
func compatLevel(ctx context.Context, q querier) (level, by string, err error) {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, compatTable).Scan(&n); err != nil || n == 0 {
		return "", "", err
	}
	err = q.QueryRowContext(ctx, `SELECT COALESCE(MAX(CASE key WHEN ? THEN value END), ''), COALESCE(MAX(CASE key WHEN ? THEN value END), '')
		FROM `+compatTable, schemacompat.KeyOldest, schemacompat.KeySetBy).Scan(&level, &by)
	return level, by, err
}

// checkCompat refuses, SchemaTooNew, a file that records a level past the
// newest of names (this binary's migrations of it).
func checkCompat(ctx context.Context, q querier, path string, names []string) error {
	level, by, err := compatLevel(ctx, q)
	if err != nil {
		return fmt.Errorf("%s: oldest-compatible level: %w", path, err)
	}
	return schemacompat.Check(path, schemacompat.Newest(names), level, by)
}

// raiseCompat records level in tx unless the file records one as high
// already: a level only rises, whoever wrote the higher one.
func raiseCompat(ctx context.Context, tx *sql.Tx, level, newest string) error {
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+compatTable+` (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT`); err != nil {
		return err
	}
	have, _, err := compatLevel(ctx, tx)
	if err != nil || level <= have {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO `+compatTable+` (key, value) VALUES (?, ?), (?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, schemacompat.KeyOldest, level, schemacompat.KeySetBy, newest)
	return err
}

// compatWant is the level the migrations of fsys/dir declare once all are
// applied: the highest directive, or the first migration when none
// declares one (any binary that knows the file at all).
func compatWant(fsys fs.FS, names []string) (string, error) {
	want := ""
	for _, name := range names {
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return "", err
		}
		base := name[strings.LastIndex(name, "/")+1:]
		d, err := schemacompat.Declared(base, string(body))
		if err != nil {
			return "", err
		}
		if want == "" {
			want = base
		}
		want = max(want, d)
	}
	return want, nil
}

// recordCompat writes the level the applied migrations declare, if the
// file records a lower one or none (one transaction, only then: an open
// of an up-to-date file writes nothing).
func recordCompat(ctx context.Context, db *DB, fsys fs.FS, names, bases []string) error {
	want, err := compatWant(fsys, names)
	if err != nil || want == "" {
		return err
	}
	have, _, err := compatLevel(ctx, db.Write)
	if err != nil || want <= have {
		return err
	}
	return InTx(ctx, db.Write, func(tx *sql.Tx) error { return raiseCompat(ctx, tx, want, schemacompat.Newest(bases)) })
}

// baseNames are the file names of the paths names.
func baseNames(names []string) []string {
	bases := make([]string, len(names))
	for i, name := range names {
		bases[i] = name[strings.LastIndex(name, "/")+1:]
	}
	return bases
}
