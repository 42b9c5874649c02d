// Package postgres keeps the queue, the identities, the run state, the
// delivery log and the effect journal of any number of touba-trigger nodes
// in one PostgreSQL (15 or later) database, schema touba (SPEC §8), behind
// the root package's storage interfaces: the multi-node sibling of package
// sqlite.
//
// Every write goes through one group-commit engine per node
// (internal/commit with a pgx backend): intake deliveries waiting together
// are decided and inserted by one statement (a multi-row INSERT ... ON
// CONFLICT on the identity) and answered only after COMMIT returned.
// Entries are leased with FOR UPDATE SKIP LOCKED for --lease-ttl, under a
// fencing token from a sequence; every change a node makes to an entry, its
// checkpoints and its effects checks that token in the same statement, so a
// node whose lease was taken over changes nothing (LeaseLost). The node
// taking over first turns the entry's dispatched effects unknown.
//
// One package, its files named by the store they hold, where package
// sqlite has a package per store: queue_*.go (entries, identities, leases,
// holds, waits, gatherings), state_*.go (runs, checkpoints, the delivery
// log), journal_*.go (effects and their events), history_*.go (--history
// and the time partitions), schema_*.go (migrations), tx*.go and pool.go
// (the group commit's transactions and the connections). The SQLite
// stores are three files with a writer each; here every store writes in
// one transaction of the same batch (a run's end, its checkpoint and its
// effect's outcome commit together), so they share the Tx and its
// statements and cannot be packages of their own without exporting them.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/commit"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/internal/uuidv7"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Schema is the PostgreSQL schema of every table.
const Schema = "touba"

// Config says which database and how to use it.
type Config struct {
	URL string // postgres://...
	// NodeID names this node in leases and audit events; default
	// hostname:pid.
	NodeID string
	// LeaseTTL is how long a lease lasts unrenewed; default 60s.
	LeaseTTL time.Duration
	// RequeueRunning puts the entries this node id left running back to
	// pending (a restart with the same --node-id); other nodes' are left
	// to lease expiry.
	RequeueRunning bool
	// Register claims NodeID in the node registry for as long as the
	// store is open (the daemon; not the CLI): refused, NodeIdInUse, while
	// another live node runs under it.
	Register bool
	// Recover runs the journal's recovery at open (the daemon's start-up):
	// dispatched effects no live lease holds become unknown.
	Recover    bool
	MaxPending int64            // default 1,000,000 (counted across nodes: queue.go, pendingRecountEvery)
	Now        func() time.Time // default time.Now; never decides a lease's expiry (the database's clock does)
	// ClockOffset, for tests, shifts the database's clock as lease
	// decisions see it: a suite whose injected clock jumps hours ahead
	// expires leases with it.
	ClockOffset func() time.Duration
	Secrets     *secret.Set
	// LogMaxRows and LogMaxAge bound the delivery log; defaults 1,000,000
	// and 168h.
	LogMaxRows int64
	LogMaxAge  time.Duration
	// LogMaxBytes (every column counted) and LogMaxBodyBytes (stored
	// bodies) bound it in bytes; defaults 1 GiB and 256 MiB.
	LogMaxBytes, LogMaxBodyBytes int64
	// OnJournalCommit sees each commit holding journal transitions.
	OnJournalCommit func(transitions int, took time.Duration)
	Log             zerolog.Logger
	// MaxConns bounds the pool; default 16.
	MaxConns int32
	// Timeout bounds every wait on the database (--database-timeout,
	// default 5s): a dial, a batch from its first statement to COMMIT, an
	// intake request's wait for its batch. Each transaction also sets the
	// server's statement_timeout and idle_in_transaction_session_timeout
	// to it and lock_timeout to a fifth of it, so that a node frozen or
	// cut off mid-transaction holds its locks no longer than that.
	Timeout time.Duration
	// History is --history (SPEC §8.1): the width of the time partitions
	// is an eighth of it (PartitionWidth); 0 keeps everything.
	History time.Duration
	// Writers is how many group-commit writers (each one connection, one
	// transaction at a time) the node runs; default 3. Intake, leasing
	// and the delivery log go through the first; an entry's own changes
	// (journal, checkpoints, its end) through the one of the others its
	// queue id hashes to, so they keep their order while other entries' commit beside
	// them: a run's changes are a few statements each, and one writer
	// alone would wait on one round trip after another.
	Writers int
}

// Store is one node's open stores on the database.
type Store struct {
	Queue   *Queue
	State   *State
	Journal *Journal
	// Slots are the bindings' max_concurrency slots, shared by the nodes.
	Slots *Slots
	// Circuits are the bindings' circuits, shared by the nodes (queue_holds.go).
	Circuits *Circuits
	// Claims are the operator actions' claims on entries, shared too.
	Claims *Claims
	// Recovered are the effects found dispatched at open under entries no
	// live lease holds, now unknown.
	Recovered []touba.Effect
	// Requeued counts this node's entries found running at open.
	Requeued int64
	// SchemaVersion is the last migration applied (its file name).
	SchemaVersion string

	db *db
}

// db is what the three stores share: the pool, the writers and the
// options.
type db struct {
	pool *pgxpool.Pool
	w    *commit.Writer[*Tx]   // intake, leases, the delivery log: ws[0]
	ws   []*commit.Writer[*Tx] // every writer
	cfg  Config
	log  zerolog.Logger
	// instance is this run's row in touba.nodes (Register); stopBeat
	// ends its heartbeat.
	instance string
	// pooled: behind a connection pooler (probeDirect); begin is how a
	// transaction begins there (beginSQL).
	pooled   bool
	begin    string
	stopBeat chan struct{}
	beatDone chan struct{}
	// deferred counts the rows the writers' flushes took (tx_deferred.go).
	deferred deferCounts
	// ids makes queue and delivery ids of cfg.Now's time.
	ids uuidv7.Generator
	// hot: the time partitions the batch statements name (hot_leaves.go).
	hot *hotLeaves
}

// writer is the writer of an entry's own changes: always the same one for
// a queue id, so that they commit in the order they were made.
// The first writer, intake's, takes none: a batch with a delivery in it
// is not redo-safe, so it would run every entry change beside it under a
// savepoint, with no statement deferred (tx_deferred.go).
func (d *db) writer(queueID string) *commit.Writer[*Tx] {
	if queueID == "" || len(d.ws) == 1 {
		return d.w
	}
	h := fnv.New32a()
	h.Write([]byte(queueID))
	return d.ws[1+h.Sum32()%uint32(len(d.ws)-1)]
}

// stats sums the writers' counters.
func (d *db) stats() commit.Stats {
	var s commit.Stats
	for _, w := range d.ws {
		st := w.Stats()
		s.Commits += st.Commits
		s.Ops += st.Ops
		s.Failed += st.Failed
		s.Pending += st.Pending
		s.Largest = max(s.Largest, st.Largest)
	}
	return s
}

func (d *db) now() string { return touba.FormatTime(d.cfg.Now()) }

// Open connects, checks that commits are durable, migrates the schema
// under an advisory lock and opens the stores.
func Open(ctx context.Context, c Config) (_ *Store, err error) {
	if c.NodeID == "" {
		host, _ := os.Hostname()
		c.NodeID = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 60 * time.Second
	}
	if c.MaxPending <= 0 {
		c.MaxPending = 1_000_000
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.LogMaxRows <= 0 {
		c.LogMaxRows = 1_000_000
	}
	if c.LogMaxAge <= 0 {
		c.LogMaxAge = 168 * time.Hour
	}
	if c.LogMaxBytes <= 0 {
		c.LogMaxBytes = 1 << 30
	}
	if c.LogMaxBodyBytes <= 0 {
		c.LogMaxBodyBytes = 256 << 20
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 16
	}
	if c.Writers <= 0 {
		c.Writers = 3
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	pool, pooled, err := connect(ctx, c)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			pool.Close()
		}
	}()
	if err := checkDurable(ctx, pool); err != nil {
		return nil, err
	}
	if err := migrate(ctx, pool, c, pooled); err != nil {
		return nil, err
	}
	d := &db{pool: pool, cfg: c, log: c.Log, pooled: pooled, begin: beginSQL(c.Timeout, pooled)}
	d.ids.Now = c.Now
	d.hot = newHotLeaves(pool)
	if c.Register {
		if err := d.register(ctx); err != nil {
			return nil, err
		}
		d.stopBeat, d.beatDone = make(chan struct{}), make(chan struct{})
		go func() { defer close(d.beatDone); d.heartbeat(d.stopBeat) }()
	}
	// Optimistic: a batch of redo-safe operations (the journal's, the
	// queue's changes, the run history) takes no savepoint per operation;
	// one that fails makes the batch run again with them (internal/commit).
	for range c.Writers {
		d.ws = append(d.ws, commit.New[*Tx](backend{pool: pool, now: d.now, begin: d.begin, set: d.set(),
			timeout: c.Timeout, dc: &d.deferred, hot: d.hot},
			commit.Options{MaxBatch: 1024, Queue: 4096, Timeout: c.Timeout, Optimistic: true}))
	}
	d.w = d.ws[0]
	s := &Store{db: d}
	if err := pool.QueryRow(ctx, `SELECT COALESCE(MAX(name), '') FROM `+Schema+`.schema_migrations`).Scan(&s.SchemaVersion); err != nil {
		s.Close()
		return nil, fmt.Errorf("schema version: %w", err)
	}
	s.Queue = newQueue(d)
	s.State = newState(d)
	s.Journal = newJournal(d)
	s.Slots = &Slots{db: d}
	s.Circuits = &Circuits{db: d}
	s.Claims = &Claims{db: d, instance: newID()}
	if err := s.Queue.start(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := d.openPartitions(ctx); err != nil {
		s.Close()
		return nil, err
	}
	d.hot.load(ctx)
	// Rows of a table openPartitions attached again were never seen by
	// the held counts' triggers.
	if err := s.Queue.recountHolds(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if c.RequeueRunning {
		if s.Requeued, err = s.Queue.RequeueRunning(ctx); err != nil {
			s.Close()
			return nil, err
		}
	}
	if c.Recover {
		if s.Recovered, err = s.Journal.Recover(ctx); err != nil {
			s.Close()
			return nil, fmt.Errorf("journal recovery: %w", err)
		}
	}
	return s, nil
}

// connect opens the pool: direct first, pooled when the sessions do not
// run with the timeouts asked at startup (see poolConfig).
func connect(ctx context.Context, c Config) (*pgxpool.Pool, bool, error) {
	for _, pooled := range []bool{false, true} {
		pc, err := poolConfig(c, pooled)
		if err != nil {
			return nil, false, err
		}
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return nil, false, fmt.Errorf("connect to the database: %w", err)
		}
		if pooled {
			return pool, true, nil
		}
		direct, err := probeDirect(ctx, pool, c.Timeout)
		if err != nil || direct {
			if err != nil {
				pool.Close()
				return nil, false, err
			}
			return pool, false, nil
		}
		pool.Close()
		c.Log.Info().Msg("database: startup parameters refused or not in effect (a connection pooler): " +
			"timeouts set per transaction, no server-side prepared statements")
	}
	panic("unreachable")
}

// checkDurable refuses a database where a commit may return before it is
// on disk: a 202 must survive a crash (SPEC §8).
func checkDurable(ctx context.Context, pool *pgxpool.Pool) error {
	var sc string
	if err := pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&sc); err != nil {
		return fmt.Errorf("connect to the database: %w", err)
	}
	if sc == "off" {
		return touba.Errorf(touba.ECONFIG, "the database has synchronous_commit = off: a commit may be lost after it returned, "+
			"so no 202 could be trusted; set it to on (or local, remote_write, remote_apply)")
	}
	return nil
}

// NodeID is the node's name in leases and audit events.
func (s *Store) NodeID() string { return s.db.cfg.NodeID }

// EffectJournal returns the journal as the interface.
func (s *Store) EffectJournal() touba.EffectJournal { return s.Journal }

// Ping checks that the database answers, for /readyz.
func (s *Store) Ping(ctx context.Context) error { return s.db.pool.Ping(ctx) }

// Close stops the writer after what was submitted, records what this node
// still held dispatched as unknown, and closes the pool. Idempotent.
func (s *Store) Close() error {
	if s.db.pool == nil {
		return nil
	}
	if s.State != nil {
		s.State.close()
	}
	if s.Queue != nil {
		s.Queue.close()
	}
	for _, w := range s.db.ws {
		w.Close()
	}
	var err error
	if s.Journal != nil {
		err = s.Journal.abandon(context.Background())
	}
	if s.db.stopBeat != nil {
		close(s.db.stopBeat)
		<-s.db.beatDone
	}
	s.db.pool.Close()
	s.db.pool = nil
	return err
}

// newID is the id of a new entry or journal handle.
func newID() string { return uuidv7.New() }

// errClosed maps the writer's closed error to the stores' sentinel.
func errClosed(err error) error {
	if errors.Is(err, commit.ErrClosed) {
		return touba.ErrClosed
	}
	return err
}
