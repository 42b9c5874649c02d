package server

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/manifest"
	"github.com/touba/touba-trigger/postgres"
	"github.com/touba/touba-trigger/sqlite"
	"github.com/touba/touba-trigger/sqlite/journal"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
)

// queueStore is what the server needs of a queue beyond touba.QueueStore.
type queueStore interface {
	touba.QueueStore
	touba.HoldStore
	HeldKeys(ctx context.Context) (int64, error)
	RunRetention(ctx context.Context, retention time.Duration, report func(purged int64, err error))
	// LatestTickID is the newest schedule tick of a trigger, its entry
	// forgotten by --history or not (package schedule catches up from
	// it).
	LatestTickID(ctx context.Context, triggerRef string) (string, error)
}

// stores is one backend's open stores, so the server does not care which:
// the three SQLite files, or a PostgreSQL database shared with other nodes.
type stores struct {
	Queue   queueStore
	State   touba.StateStore
	Journal touba.EffectJournal // nil without one
	Lock    *journal.Lock       // the SQLite journal's lock; nil otherwise
	// Slots holds max_concurrency across nodes; nil for one process.
	Slots touba.SlotStore
	// Circuits keeps the bindings' circuits (across restarts, and on
	// PostgreSQL across nodes).
	Circuits touba.CircuitStore
	// Claims shares operator actions' claims across nodes; nil for files.
	Claims admin.Claims
	// Workers shares which nodes have workers of each worker binding
	// connected (SPEC §4.3); nil for files, where one node is all.
	Workers workerPresence
	// Recovered are the effects found dispatched at open, now unknown;
	// Requeued the entries found running, now pending.
	Recovered []touba.Effect
	Requeued  int64
	// History forgets past --history and measures the storage (SPEC
	// §8.1); nil when the backend cannot.
	History touba.HistoryStore
	// Shared is true on a database other nodes use too.
	Shared bool
	// SchemaVersion is the database's last migration (--database).
	SchemaVersion string
	Close         func() error
}

// storeConfig is how to open the stores, whichever the backend.
type storeConfig struct {
	// OnWait, when set, runs once when the daemon starts waiting for a
	// database that does not answer (serveWhileWaiting).
	OnWait                func() error
	Queue, State, Journal string // the SQLite files
	Database              string // postgres://...; set, the files are not used
	NodeID                string
	LeaseTTL              time.Duration
	DatabaseTimeout       time.Duration
	TakeOverStaleLock     bool
	ExistingOnly          bool // the CLI: create nothing
	ReadOnly              bool // the CLI's read-only commands: SQLite files read-only, no lock
	Daemon                bool // requeue and recover at open
	MaxPending            int64
	History               time.Duration // --history: the width of PostgreSQL's time partitions
	StateOptions          state.Options
	Secrets               *secret.Set
	OnJournalCommit       func(int, time.Duration)
	Log                   zerolog.Logger
}

func openStores(ctx context.Context, c storeConfig) (*stores, error) {
	if c.Database != "" {
		st, err := openDatabase(ctx, c, postgres.Config{URL: c.Database, NodeID: c.NodeID, LeaseTTL: c.LeaseTTL, History: c.History,
			Timeout: c.DatabaseTimeout, Register: c.Daemon, RequeueRunning: c.Daemon, Recover: c.Daemon, MaxPending: c.MaxPending, Secrets: c.Secrets,
			LogMaxRows: c.StateOptions.LogMaxRows, LogMaxAge: c.StateOptions.LogMaxAge,
			LogMaxBytes: c.StateOptions.LogMaxBytes, LogMaxBodyBytes: c.StateOptions.LogMaxBodyBytes,
			OnJournalCommit: c.OnJournalCommit, Log: c.Log})
		if err != nil {
			return nil, err
		}
		return &stores{Queue: st.Queue, State: st.State, Journal: st.Journal, Slots: st.Slots, Circuits: st.Circuits, Claims: st.Claims,
			History: st.History(), Workers: st.Workers(),
			Recovered: st.Recovered, Requeued: st.Requeued, Shared: true, SchemaVersion: st.SchemaVersion, Close: st.Close}, nil
	}
	st, err := sqlite.Open(ctx, sqlite.Config{Queue: c.Queue, State: c.State, Journal: c.Journal,
		TakeOverStaleLock: c.TakeOverStaleLock, ExistingOnly: c.ExistingOnly, ReadOnly: c.ReadOnly, RequeueRunning: c.Daemon,
		QueueOptions: queue.Options{MaxPending: c.MaxPending}, StateOptions: c.StateOptions,
		Secrets: c.Secrets, OnJournalCommit: c.OnJournalCommit, Log: c.Log})
	if err != nil {
		return nil, err
	}
	// The circuits in the queue file: an open circuit outlives a restart
	// (issue 43), as on PostgreSQL.
	return &stores{Queue: st.Queue, State: st.State, Journal: st.EffectJournal(), Lock: st.Lock, History: st.History(),
		Circuits: st.Queue.Circuits(), Recovered: st.Recovered, Requeued: st.Requeued, Close: st.Close}, nil
}

// openDatabase opens the PostgreSQL stores; the daemon (not the CLI)
// waits for a database that does not answer yet, with backoff, logging at
// most every 5 s, until ctx ends: a node started before its database, or
// during a failover, comes up on its own instead of exiting.
func openDatabase(ctx context.Context, c storeConfig, pc postgres.Config) (*postgres.Store, error) {
	wait, lastLog, since := 250*time.Millisecond, time.Time{}, time.Now()
	for first := true; ; first = false {
		st, err := postgres.Open(ctx, pc)
		if err == nil || !c.Daemon || !postgres.Unavailable(err) {
			return st, err
		}
		if first && c.OnWait != nil {
			if err := c.OnWait(); err != nil {
				return nil, err
			}
		}
		if time.Since(lastLog) >= 5*time.Second {
			c.Log.Warn().Err(err).Str("database", postgres.Redact(pc.URL)).Dur("waited", time.Since(since).Round(time.Second)).
				Msg("database unavailable at start; waiting for it")
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// leaseMargin is how much longer than the slowest binding's call a lease
// must last: a lease renewed as the request leaves then outlives the call
// by this much, for the outcome's commit and clock skew between nodes.
const leaseMargin = 5 * time.Second

// checkLeaseTTL refuses a --lease-ttl under which a lease could expire
// while a call still legitimately runs (SPEC §8).
func checkLeaseTTL(m *manifest.Manifest, ttl time.Duration) error {
	for ref, b := range m.Bindings {
		timeout := time.Duration(b.TimeoutMS) * time.Millisecond
		if b.Handler.Options != nil {
			timeout = max(timeout, time.Duration(b.Handler.Options.TimeoutSec)*time.Second)
		}
		if ttl < timeout+leaseMargin {
			return touba.Errorf(touba.ECONFIG, "--lease-ttl %s is shorter than the timeout of %s (%s) plus a margin of %s: "+
				"a lease could expire under a call still running", ttl, ref, timeout, leaseMargin)
		}
	}
	return nil
}
