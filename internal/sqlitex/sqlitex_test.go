package sqlitex_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
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

// TestWriterTxReads: a writer transaction runs on the driver connection,
// not database/sql, and must convert arguments and scan columns as
// database/sql does for the types the stores use; a WrapTx transaction
// (start-up and close code) reads the same.
func TestWriterTxReads(t *testing.T) {
	db := open(t)
	if _, err := db.Write.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, s TEXT, n INTEGER, b BLOB, j TEXT, flag INTEGER) STRICT`); err != nil {
		t.Fatal(err)
	}
	const ins = `INSERT INTO t (id, s, n, b, j, flag) VALUES (?, ?, ?, ?, ?, ?)`
	w, err := sqlitex.NewWriter(context.Background(), db.Write, []string{ins}, commit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	type row struct {
		s    string
		n    int
		n64  int64
		b    []byte
		j    sql.NullString
		flag bool
	}
	check := func(tx *sqlitex.Tx) error {
		ctx := context.Background()
		var got row
		if err := tx.QueryRowContext(ctx, `SELECT s, n, n, b, j, flag FROM t WHERE id = 1`).Scan(
			&got.s, &got.n, &got.n64, &got.b, &got.j, &got.flag); err != nil {
			return err
		}
		if got.s != "é\x00x" || got.n != 42 || got.n64 != 42 || string(got.b) != "\x00\xff" || !got.j.Valid || got.j.String != `{"a":1}` || !got.flag {
			return fmt.Errorf("row 1 read as %+v", got)
		}
		var j sql.NullString
		var b []byte
		if err := tx.QueryRowContext(ctx, `SELECT j, b FROM t WHERE id = 2`).Scan(&j, &b); err != nil || j.Valid || b != nil {
			return fmt.Errorf("row 2: %v %+v %v, want NULLs", err, j, b)
		}
		if err := tx.QueryRowContext(ctx, `SELECT s FROM t WHERE id = 3`).Scan(&got.s); !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("no row: %v, want sql.ErrNoRows", err)
		}
		rows, err := tx.QueryContext(ctx, `SELECT id FROM t ORDER BY id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil || len(ids) != 2 || ids[0] != 1 || ids[1] != 2 {
			return fmt.Errorf("ids %v, %v", ids, err)
		}
		return nil
	}
	err = w.Do(context.Background(), func(ctx context.Context, tx *sqlitex.Tx) error {
		// An int, a named []byte type and a driver.Valuer, as the stores pass them.
		res, err := tx.ExecContext(ctx, ins, 1, "é\x00x", 42, json.RawMessage("\x00\xff"), sql.NullString{String: `{"a":1}`, Valid: true}, true)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("rows affected %d", n)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO t (id, s, n, b, j, flag) VALUES (?, ?, ?, ?, ?, ?)`, 2, "", int64(0), nil, nil, false); err != nil {
			return err
		}
		return check(tx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlitex.InTx(context.Background(), db.Write, func(tx *sql.Tx) error { return check(sqlitex.WrapTx(tx)) }); err != nil {
		t.Fatalf("WrapTx: %v", err)
	}
}
