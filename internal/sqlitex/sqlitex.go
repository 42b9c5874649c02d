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

	_ "github.com/mattn/go-sqlite3" // the database/sql driver "sqlite3"
)

// DB is one SQLite file: Write has a single connection so that writes are
// serialised in the process (SQLite allows one writer anyway); Read is a
// small pool for queries that must not wait behind a batch commit.
type DB struct {
	Path  string
	Write *sql.DB
	Read  *sql.DB
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
	q.Set("_synchronous", "FULL")
	q.Set("_foreign_keys", "1")
	q.Set("_txlock", "immediate")
	w, err := sql.Open("sqlite3", "file:"+path+"?"+q.Encode())
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
	if err := w.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil || sync != 2 {
		w.Close()
		return nil, fmt.Errorf("open %s: synchronous=%d (%v), want FULL", path, sync, err)
	}

	q.Set("_txlock", "deferred")
	q.Set("_query_only", "1")
	r, err := sql.Open("sqlite3", "file:"+path+"?"+q.Encode())
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	return &DB{Path: path, Write: w, Read: r}, nil
}

// Close closes both handles.
func (db *DB) Close() error {
	return errors.Join(db.Read.Close(), db.Write.Close())
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
