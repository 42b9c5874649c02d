package sqlitex_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/touba/touba-trigger/internal/commit"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

func open(t *testing.T) *sqlitex.DB {
	t.Helper()
	db, err := sqlitex.Open(filepath.Join(t.TempDir(), "sub", "x.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestOpenSettings(t *testing.T) {
	db := open(t)
	var mode string
	var sync int
	db.Write.QueryRow(`PRAGMA journal_mode`).Scan(&mode)
	db.Write.QueryRow(`PRAGMA synchronous`).Scan(&sync)
	if mode != "wal" || sync != 2 {
		t.Fatalf("journal_mode=%s synchronous=%d, want wal and 2 (FULL)", mode, sync)
	}
	fi, err := os.Stat(db.Path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if _, err := db.Read.Exec(`CREATE TABLE nope (x)`); err == nil {
		t.Fatal("the read pool accepted a write")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestMigrateOnceEach(t *testing.T) {
	db := open(t)
	fsys := fstest.MapFS{
		"m/0001_a.sql": {Data: []byte(`CREATE TABLE a (x INTEGER) STRICT;`)},
		"m/0002_b.sql": {Data: []byte(`INSERT INTO a VALUES (1);`)},
	}
	for i := 0; i < 2; i++ {
		if err := sqlitex.Migrate(context.Background(), db, fsys, "m"); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	db.Write.QueryRow(`SELECT COUNT(*) FROM a`).Scan(&n)
	if n != 1 {
		t.Fatalf("rows=%d, want 1: a migration ran twice", n)
	}
	fsys["m/0003_bad.sql"] = &fstest.MapFile{Data: []byte(`INSERT INTO a VALUES (2); NOT SQL;`)}
	if err := sqlitex.Migrate(context.Background(), db, fsys, "m"); err == nil {
		t.Fatal("a broken migration was applied")
	}
	db.Write.QueryRow(`SELECT COUNT(*) FROM a`).Scan(&n)
	if n != 1 {
		t.Fatalf("rows=%d after a failed migration, want 1: it was half applied", n)
	}
}

// TestWriter: concurrent operations share commits, and one failing
// operation undoes only its own writes.
func TestWriter(t *testing.T) {
	db := open(t)
	db.Write.Exec(`CREATE TABLE t (k INTEGER PRIMARY KEY)`)
	const insert = `INSERT INTO t VALUES (?)`
	w, err := sqlitex.NewWriter(context.Background(), db.Write, []string{insert}, commit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 100)
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = w.Do(context.Background(), func(ctx context.Context, tx *sqlitex.Tx) error {
				if _, err := tx.ExecContext(ctx, insert, i); err != nil {
					return err
				}
				if i%10 == 0 {
					return errors.New("refused")
				}
				return nil
			})
		}(i)
	}
	wg.Wait()
	w.Close()
	for i, err := range errs {
		if (err != nil) != (i%10 == 0) {
			t.Fatalf("op %d: err=%v", i, err)
		}
	}
	var n int
	db.Write.QueryRow(`SELECT COUNT(*) FROM t`).Scan(&n)
	if n != 90 {
		t.Fatalf("rows=%d, want 90", n)
	}
	if st := w.Stats(); st.Ops != 90 || st.Failed != 10 || st.Commits >= 100 {
		t.Fatalf("stats=%+v: want 90 done, 10 failed, fewer commits than operations", st)
	}
	if err := w.Do(context.Background(), func(context.Context, *sqlitex.Tx) error { return nil }); !errors.Is(err, commit.ErrClosed) {
		t.Fatalf("Do after Close: %v", err)
	}
}
