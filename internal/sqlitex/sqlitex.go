// Package sqlitex opens SQLite files the one right way for touba-trigger:
// WAL, synchronous=FULL, a busy timeout, immediate write transactions, one
// writer connection and a separate reader pool, and embedded migrations
// applied in order, one transaction each.
package sqlitex

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// Checkpoints: SQLite's automatic checkpoint runs inside the commit that
// crosses its threshold, copying every WAL frame into the database and
// fsyncing it while all callers of that batch wait. A separate connection
// therefore checkpoints in the background (WAL lets a checkpoint and a
// writer run at once), so that little is left to copy when the writer's
// own automatic checkpoint comes. The writer keeps one, at a larger
// threshold, because only a checkpoint that completes between two commits
// lets the WAL start over: under steady writes the background one never
// does, and the WAL would grow without bound.
const (
	writerDriver = "sqlite3_touba_writer"
	readerDriver = "sqlite3_touba_reader"
	cacheKiB     = 32 << 10
	walPages     = 4096 // automatic checkpoint at about 16 MB of WAL
)

// temp_store=MEMORY on the writer: every op of a batch runs under a
// savepoint, and the statement journal that savepoints and multi-row
// updates keep spills to a temporary file past 64 KiB, so a batch that
// touches many pages (a per-key release dirties the next entry's row and
// index pages far from the finished one's) paid for file writes on every
// statement. Batches are bounded (MaxBatch), so the memory is too.

func init() {
	sql.Register(writerDriver, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		_, err := c.Exec(fmt.Sprintf(`PRAGMA wal_autocheckpoint=%d; PRAGMA cache_size=-%d; PRAGMA temp_store=MEMORY`, walPages, cacheKiB), nil)
		return err
	}})
	sql.Register(readerDriver, &sqlite3.SQLiteDriver{})
}

// DB is one SQLite file: Write has a single connection so that writes are
// serialised in the process (SQLite allows one writer anyway); Read is a
// small pool for queries that must not wait behind a batch commit.
type DB struct {
	Path  string
	Write *sql.DB
	Read  *sql.DB

	ckpt     *sql.DB // nil when read-only
	readOnly bool
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// Open opens (creating if needed) the SQLite file at path, with its folder,
// and checks that WAL mode took effect.
func Open(path string) (*DB, error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
	}
	// Bodies and results may be private: create the file 0600 before
	// SQLite does (its -wal and -shm files take the same mode).
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	} else {
		f.Close()
	}
	q := url.Values{}
	q.Set("_busy_timeout", "10000")
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", synchronous())
	q.Set("_foreign_keys", "1")
	q.Set("_txlock", "immediate")
	w, err := sql.Open(writerDriver, uri(path, q))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)

	var mode string
	if err := w.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if mode != "wal" {
		w.Close()
		return nil, fmt.Errorf("open %s: journal_mode is %q, want wal", path, mode)
	}
	var sync int
	if err := w.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil || (sync != 2 && !testSyncOff()) {
		w.Close()
		return nil, fmt.Errorf("open %s: synchronous=%d (%v), want FULL", path, sync, err)
	}

	q.Set("_txlock", "deferred")
	c, err := sql.Open(readerDriver, uri(path, q))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	c.SetMaxOpenConns(1)
	q.Set("_query_only", "1")
	r, err := sql.Open(readerDriver, uri(path, q))
	if err != nil {
		w.Close()
		c.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	db := &DB{Path: path, Write: w, Read: r, ckpt: c, stop: make(chan struct{})}
	db.wg.Add(1)
	go db.checkpointer()
	return db, nil
}

// TestOnlySyncOffEnv, set to 1, opens every file with synchronous=OFF, so
// that no commit waits for an fsync. It exists only for the power-loss test
// (tests/powerloss) to prove that it notices the missing fsync: it loses
// acknowledged deliveries, and must never be set anywhere else.
const TestOnlySyncOffEnv = "TOUBA_TEST_SQLITE_SYNC_OFF"

func testSyncOff() bool { return os.Getenv(TestOnlySyncOffEnv) == "1" }

func synchronous() string {
	if testSyncOff() {
		return "OFF"
	}
	return "FULL"
}

// checkpointInterval is how often the background checkpoint runs; at
// intake rates the WAL grows a few MB in that time.
const checkpointInterval = 200 * time.Millisecond

func (db *DB) checkpointer() {
	defer db.wg.Done()
	t := time.NewTicker(checkpointInterval)
	defer t.Stop()
	for {
		select {
		case <-db.stop:
			return
		case <-t.C:
			// PASSIVE never blocks the writer; frames it could not copy
			// yet are taken on the next tick.
			db.ckpt.Exec(`PRAGMA wal_checkpoint(PASSIVE)`)
		}
	}
}

// Close stops the checkpointer, checkpoints what is left and closes the
// handles. It is safe to call more than once.
func (db *DB) Close() error {
	var err error
	db.stopOnce.Do(func() {
		close(db.stop)
		db.wg.Wait()
		if db.ckpt != nil {
			err = db.ckpt.Close()
		}
		err = errors.Join(err, db.Read.Close(), db.Write.Close())
	})
	return err
}

// InTx runs fn in a write transaction and commits it, or rolls back when fn
// or the commit fails.
func InTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// CountBy runs query, which selects a key and a count (`SELECT k, COUNT(*)
// ... GROUP BY k`), and returns the counts by key.
func CountBy(ctx context.Context, db *sql.DB, query string, args ...any) (map[string]int64, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, rows.Err()
}

// uri is path as an SQLite URI with the query q. SQLite decodes %HH in a
// URI's path and ends it at '?' or '#', so those three are escaped: a
// --queue of "/var/lib/a#1/q.sqlite" would otherwise open "/var/lib/a".
func uri(path string, q url.Values) string {
	return "file:" + strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path) + "?" + q.Encode()
}
