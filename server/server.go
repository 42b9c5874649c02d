// Package server is the daemon's life cycle as a library: Open loads the
// program and manifest and opens the stores (journal lock, journal and its
// recovery, queue, state file); Run starts the dispatcher, the admin
// socket, the listeners and the background work, serves until its context
// ends, then drains (SPEC §3.3); Close stops what is left and closes the
// stores. `touba-trigger serve` is a thin wrapper around it, and tests run
// it in process on port 0.
package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/internal/systemd"
	"github.com/touba/touba-trigger/metrics"
	"github.com/touba/touba-trigger/postgres"
	"github.com/touba/touba-trigger/schedule"
	"github.com/touba/touba-trigger/sqlite/state"
	"github.com/touba/touba-trigger/tracing"
	"github.com/touba/touba-trigger/trigger"
	"github.com/touba/touba-trigger/worker"
)

// Config is everything `serve` is told (SPEC §3).
type Config struct {
	Program, Manifest string
	// ExpressionCostLimit is --expression-cost-limit (SPEC §2.4); 0 is
	// the default, 1,000,000.
	ExpressionCostLimit                uint64
	Queue, State, Journal              string // Journal "" runs without an effect journal
	Listen, MetricsListen, AdminSocket string // MetricsListen and AdminSocket "" disable them
	Workers                            int    // 0 runs intake only
	MaxPending                         int64
	Retention, ShutdownTimeout         time.Duration
	// History is --history (SPEC §8.1): finished entries changed last
	// longer ago are forgotten; 0 keeps everything.
	History                     time.Duration
	TakeOverStaleLock           bool
	LogMaxRows, LogMaxBodyBytes int64
	LogMaxBytes                 int64
	LogMaxAge                   time.Duration
	TrustedProxies              []netip.Prefix
	// Database (postgres://...) keeps every store in one PostgreSQL
	// database shared by the nodes (SPEC §8) instead of the files.
	Database string
	NodeID   string        // this node's name in leases, events and metrics; default hostname:pid
	LeaseTTL time.Duration // default 60s
	// DatabaseTimeout bounds every wait on the database (default 5s): a
	// request that cannot commit within it is answered 503.
	DatabaseTimeout time.Duration
	// ConsoleListen serves the operator console (SPEC §6.1) when set;
	// ConsoleToken is what its requests must prove (required then).
	ConsoleListen string
	ConsoleToken  []byte
	// AllowUnisolatedHandlers runs process bindings without the network
	// grant with the host's network where it cannot isolate them, with a
	// warning, instead of refusing them (NetworkIsolationUnavailable).
	AllowUnisolatedHandlers bool
	// EgressDeny adds ranges the egress guard refuses to every webhook and
	// http binding (--egress-deny); a binding's allow_addresses still win.
	EgressDeny []netip.Prefix
	// ScheduleClock is the time schedule triggers tick on; nil: the
	// system clock (tests set a schedule.Manual).
	ScheduleClock schedule.Clock

	Log     zerolog.Logger
	Tracing *tracing.Tracing // nil: off
	// Notifier speaks sd_notify; nil: systemd.NewNotifier().
	Notifier *systemd.Notifier
}

// Server is one run of the daemon: its stores, its servers and the order
// in which they start and stop.
type Server struct {
	cfg     Config
	log     zerolog.Logger
	notify  *systemd.Notifier
	tracing *tracing.Tracing

	metrics  *metrics.Metrics
	stubs    *dispatcher.Stubs
	current  atomic.Pointer[dispatcher.Config] // what compensations and delivery replays use; swapped on reload
	secrets  *secret.Set                       // every resolved value since start; the journal checks against it
	deadline time.Time                         // of the shutdown in progress
	store    *stores
	disp     *dispatcher.Dispatcher
	// onCircuit counts circuit transitions in the metrics (holds.go).
	onCircuit func(toolRef, from, to string)
	intake    *trigger.Intake
	sched     *schedule.Scheduler // the schedule triggers' ticks
	history   *historyLoop        // --history; nil when the backend forgets nothing

	httpSrv, metricsSrv *http.Server
	waiting             *waitServer // the answers while waiting for the database at start
	httpAddr, metAddr   net.Addr
	conns               *connTracker // the webhook listener and its connections
	adminSrv            *admin.Server
	consoleSrv          *http.Server
	consoleAddr         net.Addr
	activated           bool // the webhook listener came from systemd
	stopping            atomic.Bool
	serveErr            chan error
	ready               chan struct{} // closed once every listener is bound

	bgCancel context.CancelFunc           // retention, watchdog, reload
	health   atomic.Pointer[admin.Health] // the last readiness check, for /readyz and the admin socket
	bg       sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// Open loads the configuration and opens the stores: the journal lock
// first, since it is what keeps a second daemon off the files. On error,
// what was opened is closed.
func Open(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Tracing == nil {
		cfg.Tracing = tracing.Off()
	}
	if cfg.Notifier == nil {
		cfg.Notifier = systemd.NewNotifier()
	}
	s := &Server{cfg: cfg, log: cfg.Log, notify: cfg.Notifier, tracing: cfg.Tracing, ready: make(chan struct{})}
	if err := s.open(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) open(ctx context.Context) error {
	f, log := s.cfg, s.log
	c, err := LoadConfig(f.Program, f.Manifest, f.ExpressionCostLimit)
	if err != nil {
		return err
	}
	if err := checkIsolation(c.Manifest, f.AllowUnisolatedHandlers, log); err != nil {
		return err
	}
	s.stubs = &dispatcher.Stubs{Workers: worker.NewHub(nil)}
	if f.Database != "" {
		if s.cfg.NodeID == "" {
			host, _ := os.Hostname()
			s.cfg.NodeID = fmt.Sprintf("%s:%d", host, os.Getpid())
		}
		if s.cfg.LeaseTTL <= 0 {
			s.cfg.LeaseTTL = 60 * time.Second
		}
		if s.cfg.DatabaseTimeout <= 0 {
			s.cfg.DatabaseTimeout = postgres.DefaultTimeout
		}
		if err := checkLeaseTTL(c.Manifest, s.cfg.LeaseTTL); err != nil {
			return err
		}
		f = s.cfg
	}
	dcfg, err := dispatcher.NewConfig(c.Program, c.Manifest, c.Resolved, f.Journal != "" || f.Database != "", s.stubs,
		dispatcher.Outbound{EgressDeny: f.EgressDeny}, log)
	if err != nil {
		return err
	}
	s.current.Store(dcfg)
	s.secrets = c.Secrets
	for _, t := range c.Program.Triggers {
		if why := t.UnsignedEventID(); why != "" {
			log.Warn().Str("trigger_ref", t.Ref).Str("reason", why).Msg("replayable: the signature does not cover the event id")
		}
	}
	for _, w := range HistoryWarnings(c.Program, f.History) {
		log.Warn().Dur("history", f.History).Msg(w)
	}
	logMaxAge := f.LogMaxAge
	if f.History > 0 && (logMaxAge <= 0 || logMaxAge > f.History) {
		logMaxAge = f.History // the delivery log is history too
	}
	s.metrics = metrics.NewNode(f.NodeID)
	s.metrics.WatchTracing(s.tracing.DroppedSpans)
	s.metrics.WatchBrokers(s.brokerCounts)
	s.metrics.WatchWorkers(s.workerCounts)
	// A database that does not answer yet is waited for; the node answers
	// meanwhile (startwait.go).
	s.store, err = openStores(ctx, storeConfig{OnWait: s.serveWhileWaiting, Queue: f.Queue, State: f.State, Journal: f.Journal,
		Database: f.Database, NodeID: f.NodeID, LeaseTTL: f.LeaseTTL, DatabaseTimeout: f.DatabaseTimeout,
		TakeOverStaleLock: f.TakeOverStaleLock, Daemon: true, MaxPending: f.MaxPending, History: f.History,
		StateOptions: state.Options{LogMaxRows: f.LogMaxRows, LogMaxAge: logMaxAge, LogMaxBodyBytes: f.LogMaxBodyBytes,
			LogMaxBytes: f.LogMaxBytes, Log: log.With().Str("component", "deliverylog").Logger()},
		Secrets: c.Secrets, OnJournalCommit: s.metrics.ObserveJournalCommit, Log: log})
	if err != nil {
		return err
	}
	s.logOpened()
	st := s.store
	var jm metrics.Journal = st.Journal
	if st.Journal == nil {
		jm = nil
	}
	s.metrics.WatchFiles(st.Queue, jm, st.State)
	s.metrics.WatchFlow(st.Queue.HeldKeys, func() int64 {
		if disp := s.disp; disp != nil {
			return disp.WaitingForSlot()
		}
		return 0
	})
	s.watchHeld()
	s.watchHolds()
	s.watchHistory()
	var dbUp func() bool
	if f.Database != "" {
		// With a database the health check is its ping alone.
		dbUp = func() bool { h := s.health.Load(); return h != nil && h.Ready }
	}
	s.metrics.WatchHealth(func() bool { return s.readyz(context.Background()) == nil }, dbUp)
	s.intake = &trigger.Intake{Queue: st.Queue, Log: st.State, Logger: log.With().Str("component", "intake").Logger(),
		Observe: s.metrics.ObserveDelivery, TrustedProxies: f.TrustedProxies}
	s.watchGatherings(c.Program)
	s.listenToHeldKeys(c.Program)
	s.intake.SetConfig(c.Intake)
	s.sched = s.newScheduler(c.Program)
	return nil
}

// logOpened says what opening the stores found: a stale lock taken over,
// effects left dispatched (now unknown), entries left running.
func (s *Server) logOpened() {
	st, log := s.store, s.log
	if s.cfg.Database != "" {
		log.Info().Str("database", postgres.Redact(s.cfg.Database)).Str("node_id", s.cfg.NodeID).
			Str("schema_version", st.SchemaVersion).Dur("database_timeout", s.cfg.DatabaseTimeout).Msg("database opened")
	}
	if st.Lock != nil && st.Lock.TookOver != nil {
		log.Warn().Str("previous_holder", st.Lock.TookOver.String()).Msg("took over a stale journal lock")
	}
	for _, e := range st.Recovered {
		event := "run.needs_reconciliation"
		if e.RetryMode == touba.RetryIdempotencyKey {
			event = "effect.unknown"
		}
		log.Warn().Str("event", event).Str("queue_id", e.Scope).Str("effect_id", e.EffectID).
			Str("retry_mode", e.RetryMode).Msg("effect was dispatched when the daemon stopped; its outcome is unknown")
	}
	if st.Requeued > 0 {
		log.Warn().Int64("entries", st.Requeued).Msg("entries left running by a crash are pending again")
	}
}

// Addr is the address the webhook listener is bound to, once Ready.
func (s *Server) Addr() net.Addr { return s.httpAddr }

// MetricsAddr is the metrics listener's address once Ready; nil without.
func (s *Server) MetricsAddr() net.Addr { return s.metAddr }

// Ready is closed once Run has bound every listener and started the
// dispatcher.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Close stops everything still running and closes the stores and the
// lock, last opened first. Idempotent; the first call's error is kept.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.closeWaiting()
		s.stopServers()
		if s.store != nil {
			s.closeErr = s.store.Close()
		}
	})
	return s.closeErr
}
