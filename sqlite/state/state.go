// Package state is the state file: run checkpoints (step outputs and run
// status) and the delivery log of every request that did not create a queue
// entry. Log rows are cut to fixed caps before they are buffered, buffered
// within a byte bound, written in batches by one goroutine and bounded on
// disk in count, age, bytes (every column) and stored body bytes, so a
// flood of bad requests neither slows acceptance nor fills the memory or
// the disk.
package state

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/commit"
	"github.com/touba/touba-trigger/internal/sqlitex"
)

//go:embed schema/*.sql
var schema embed.FS

// Options tune the state file. Zero values take the defaults.
type Options struct {
	LogMaxRows      int64         // default 1,000,000
	LogMaxAge       time.Duration // default 168h
	LogMaxBodyBytes int64         // default 256 MiB
	LogMaxBytes     int64         // every column of every row; default 1 GiB
	LogBuffer       int           // rows waiting to be written; default 65536
	LogBufferBytes  int64         // bytes those rows hold (bodies included); default 64 MiB
	PruneEvery      time.Duration // default 30s
	Now             func() time.Time
	Log             zerolog.Logger
	// ReadOnly opens an existing file for reading only (the operator's
	// read-only commands with no daemon): no migration, no writer, no
	// pruning; every change fails with sqlitex.ErrReadOnly.
	ReadOnly bool
}

// State is an open state file.
type State struct {
	db   *sqlitex.DB
	opts Options
	w    *sqlitex.Writer // run checkpoints, group-committed
	// steps is Steps' query, prepared once on the reader pool: every run
	// reads its checkpoints, and parsing the SQL each time cost more than
	// running it.
	steps *sql.Stmt

	rows    chan *waiting
	mu      sync.RWMutex
	closed  bool
	done    chan struct{}
	flushes chan chan struct{}
	prunes  chan chan error

	written  atomic.Int64
	dropped  atomic.Int64
	buffered atomic.Int64 // bytes held by rows waiting for the writer (heldBytes + body)

	// Owned by the writer goroutine: the table's totals as committed, and
	// whether an age check is due, and whether the last prune failed (no
	// more tries until the next tick).
	totals      logTotals
	ageDue      bool
	pruneFailed bool
}

// Open opens or creates the state file and starts the log writer.
func Open(ctx context.Context, path string, opts Options) (*State, error) {
	if opts.LogMaxRows <= 0 {
		opts.LogMaxRows = 1_000_000
	}
	if opts.LogMaxAge <= 0 {
		opts.LogMaxAge = 168 * time.Hour
	}
	if opts.LogMaxBodyBytes <= 0 {
		opts.LogMaxBodyBytes = 256 << 20
	}
	if opts.LogMaxBytes <= 0 {
		opts.LogMaxBytes = 1 << 30
	}
	if opts.LogBufferBytes <= 0 {
		opts.LogBufferBytes = 64 << 20
	}
	if opts.LogBuffer <= 0 {
		opts.LogBuffer = 65536
	}
	if opts.PruneEvery <= 0 {
		opts.PruneEvery = 30 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ReadOnly {
		return openReadOnly(ctx, path, opts)
	}
	db, err := sqlitex.Open(path)
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	if err := sqlitex.Migrate(ctx, db, schema, "schema"); err != nil {
		db.Close()
		return nil, fmt.Errorf("state: %w", err)
	}
	s := &State{db: db, opts: opts, rows: make(chan *waiting, opts.LogBuffer),
		done: make(chan struct{}), flushes: make(chan chan struct{}), prunes: make(chan chan error)}
	if s.totals, err = loadTotals(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("state: %w", err)
	}
	if s.w, err = sqlitex.NewWriter(ctx, db.Write, []string{qInsertRun, qSaveStep, qInsertLog}, commit.Options{}); err != nil {
		db.Close()
		return nil, fmt.Errorf("state: %w", err)
	}
	if s.steps, err = db.Read.PrepareContext(ctx, qSteps); err != nil {
		s.w.Close()
		db.Close()
		return nil, fmt.Errorf("state: %w", err)
	}
	go s.logWriter()
	return s, nil
}

// Close writes the rows already logged and closes the file. Idempotent.
func (s *State) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.rows)
	s.mu.Unlock()
	<-s.done
	if s.w != nil {
		s.w.Close()
	}
	s.steps.Close()
	return s.db.Close()
}

// DB exposes the file to the packages that keep run checkpoints in it.
func (s *State) DB() *sqlitex.DB { return s.db }

// LogStats returns how many log rows were written and how many were
// dropped because the buffer was full.
func (s *State) LogStats() (written, dropped int64) { return s.written.Load(), s.dropped.Load() }

// BatchStats returns the checkpoint writer's commits and operations.
func (s *State) BatchStats() (commits, ops int64) {
	if s.w == nil {
		return 0, 0
	}
	st := s.w.Stats()
	return st.Commits, st.Ops
}

var (
	_ touba.RunStore    = (*State)(nil)
	_ touba.DeliveryLog = (*State)(nil)
	_ touba.AuditLog    = (*State)(nil)
)

// openReadOnly is Open with opts.ReadOnly.
func openReadOnly(ctx context.Context, path string, opts Options) (*State, error) {
	db, err := sqlitex.OpenReadOnly(path)
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	if err := sqlitex.CheckMigrated(ctx, db, schema, "schema"); err != nil {
		db.Close()
		return nil, fmt.Errorf("state: %w", err)
	}
	s := &State{db: db, opts: opts, rows: make(chan *waiting, 1), done: make(chan struct{}),
		flushes: make(chan chan struct{}), prunes: make(chan chan error)}
	close(s.done) // no log writer
	if s.steps, err = db.Read.PrepareContext(ctx, qSteps); err != nil {
		db.Close()
		return nil, fmt.Errorf("state: %w", err)
	}
	return s, nil
}
