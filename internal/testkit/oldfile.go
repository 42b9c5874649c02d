package testkit

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/touba/touba-trigger/internal/sqlitex"
)

// OldFile makes a SQLite file at path as a release without migration
// before left it: the *.sql files of dir (relative to the calling test's
// package) whose names sort before before, applied in order. The caller
// writes its rows through the returned handle and closes it; opening the
// file with its store then runs the rest.
func OldFile(tb testing.TB, path, dir, before string) *sqlitex.DB {
	tb.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	if err != nil {
		tb.Fatal(err)
	}
	old := fstest.MapFS{}
	for _, name := range names {
		if filepath.Base(name) >= before {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			tb.Fatal(err)
		}
		old[dir+"/"+filepath.Base(name)] = &fstest.MapFile{Data: b}
	}
	db, err := sqlitex.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := sqlitex.Migrate(context.Background(), db, old, dir); err != nil {
		db.Close()
		tb.Fatal(err)
	}
	return db
}
