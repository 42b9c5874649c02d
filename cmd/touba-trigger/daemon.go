package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/sqlite/journal"
	"github.com/touba/touba-trigger/metrics"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
	"github.com/touba/touba-trigger/tracing"
	"github.com/touba/touba-trigger/trigger"
)

// daemon is one run of `serve`: its files, its servers and the order in
// which they start and stop.
type daemon struct {
	f           *serveFlags
	programPath string
	log         zerolog.Logger
	notify      *notifier
	tracing     *tracing.Tracing

	metrics  *metrics.Metrics
	stubs    *dispatcher.Stubs
	current  atomic.Pointer[dispatcher.Config] // what compensations and delivery replays use; swapped on reload
	secrets  *secret.Set                       // every resolved value since start; the journal checks against it
	deadline time.Time                         // of the shutdown in progress
	jr       *journal.Journal
	q        *queue.Queue
	st       *state.State
	disp     *dispatcher.Dispatcher
	intake   *trigger.Intake

	httpSrv, metricsSrv *http.Server
	conns               *connTracker // the webhook listener and its connections
	adminSrv            *admin.Server
	activated           bool // the webhook listener came from systemd
	stopping            atomic.Bool
	serveErr            chan error

	bgCancel context.CancelFunc           // retention, watchdog, reload
	health   atomic.Pointer[admin.Health] // the last readiness check, for /readyz and the admin socket
	bg       sync.WaitGroup

	closers   []func() error // run in reverse by close
	closeOnce sync.Once
	closeErr  error
}

// open loads the configuration and opens the files: the journal lock
// first, since it is what keeps a second daemon off these files.
func (d *daemon) open(ctx context.Context) error {
	f, log := d.f, d.log
	cfg, err := loadConfig(d.programPath, f.manifest)
	if err != nil {
		return err
	}
	d.stubs = &dispatcher.Stubs{}
	dcfg, err := dispatcher.NewConfig(cfg.program, cfg.manifest, cfg.resolved, f.journal != "", d.stubs, log)
	if err != nil {
		return err
	}
	d.current.Store(dcfg)
	d.secrets = cfg.secrets
	for _, t := range cfg.program.Triggers {
		if why := t.UnsignedEventID(); why != "" {
			log.Warn().Str("trigger_ref", t.Ref).Str("reason", why).Msg("replayable: the signature does not cover the event id")
		}
	}
	d.metrics = metrics.New()

	if f.journal != "" {
		lock, err := journal.AcquireLock(f.journal, journal.LockOptions{TakeOverStale: f.takeOverStaleLock})
		if err != nil {
			return err
		}
		d.closers = append(d.closers, lock.Release)
		if lock.TookOver != nil {
			log.Warn().Str("previous_holder", lock.TookOver.String()).Msg("took over a stale journal lock")
		}
		d.jr, err = journal.Open(ctx, f.journal, journal.Options{Secrets: cfg.secrets, Log: log,
			OnCommit: d.metrics.ObserveJournalCommit})
		if err != nil {
			return err
		}
		d.closers = append(d.closers, d.jr.Close)
		recovered, err := d.jr.Recover(ctx)
		if err != nil {
			return fmt.Errorf("journal recovery: %w", err)
		}
		for _, e := range recovered {
			event := "run.needs_reconciliation"
			if e.RetryMode == touba.RetryIdempotencyKey {
				event = "effect.unknown"
			}
			log.Warn().Str("event", event).Str("queue_id", e.Scope).Str("effect_id", e.EffectID).
				Str("retry_mode", e.RetryMode).Msg("effect was dispatched when the daemon stopped; its outcome is unknown")
		}
	}

	if d.q, err = queue.Open(ctx, f.queue, queue.Options{MaxPending: f.maxPending}); err != nil {
		return err
	}
	d.closers = append(d.closers, d.q.Close)
	// Entries left running by a crash are pending again (SPEC §3.2), even
	// with no dispatcher to run them now.
	if n, err := d.q.RequeueRunning(ctx); err != nil {
		return err
	} else if n > 0 {
		log.Warn().Int64("entries", n).Msg("entries left running by a crash are pending again")
	}
	d.st, err = state.Open(ctx, f.state, state.Options{LogMaxRows: f.logMaxRows, LogMaxAge: f.logMaxAge,
		LogMaxBodyBytes: f.logMaxBodyBytes, LogMaxBytes: f.logMaxBytes, Log: log.With().Str("component", "deliverylog").Logger()})
	if err != nil {
		return err
	}
	d.closers = append(d.closers, d.st.Close)
	var jm metrics.Journal
	if d.jr != nil {
		jm = d.jr
	}
	d.metrics.WatchFiles(d.q, jm, d.st)
	d.metrics.WatchFlow(d.q.HeldKeys, func() int64 {
		if disp := d.disp; disp != nil {
			return disp.WaitingForSlot()
		}
		return 0
	})

	d.intake = &trigger.Intake{Queue: d.q, Log: d.st, Logger: log.With().Str("component", "intake").Logger(),
		Observe: d.metrics.ObserveDelivery, TrustedProxies: f.trustedProxies}
	d.intake.SetConfig(cfg.intake)
	return nil
}

// start runs the dispatcher, the admin socket, the listeners and the
// background work, then tells systemd the daemon is ready.
func (d *daemon) start(ctx context.Context) error {
	f, log := d.f, d.log
	if f.workers > 0 {
		var j dispatcher.Journal
		if d.jr != nil {
			j = d.jr
		}
		d.disp = dispatcher.New(d.q, d.st, j, d.current.Load(), dispatcher.Options{Workers: f.workers,
			Log: log.With().Str("component", "dispatcher").Logger(), Observe: d.metrics.ObserveCall,
			Tracing: d.tracing})
		d.intake.Enqueued = d.disp.Notify
	}
	if f.adminSocket != "" {
		srv, err := admin.Listen(f.adminSocket, d.adminService())
		if err != nil {
			return err
		}
		d.adminSrv = srv
		go func() {
			if err := srv.Serve(); err != nil {
				log.Error().Err(err).Msg("admin socket stopped")
			}
		}()
	}

	acts, err := activationListeners(log)
	if err != nil {
		return err
	}
	ln := acts.take("http")
	d.activated = ln != nil
	if ln == nil {
		if ln, err = net.Listen("tcp", f.listen); err != nil {
			return fmt.Errorf("listen %s: %w", f.listen, err)
		}
	}
	mln := acts.take("metrics")
	for name, extra := range acts {
		log.Warn().Str("name", name).Msg("activated socket with an unknown name; closed")
		extra.Close()
	}
	if mln == nil && f.metricsListen != "" {
		if mln, err = net.Listen("tcp", f.metricsListen); err != nil {
			ln.Close()
			return fmt.Errorf("metrics listen %s: %w", f.metricsListen, err)
		}
	}

	// The dispatcher starts once every socket is bound: a port in use
	// then stops the daemon before any handler was called.
	if d.disp != nil {
		if err := d.disp.Start(ctx); err != nil {
			ln.Close()
			if mln != nil {
				mln.Close()
			}
			return err
		}
	}
	bgCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.bgCancel = cancel
	// The first health check before the first /readyz; then in the
	// background (runHealth).
	d.health.Store(d.checkHealth(ctx))
	d.background(bgCtx)
	d.serveErr = make(chan error, 2)
	d.conns = newConnTracker(ln)
	d.httpSrv = &http.Server{
		Handler:           d.tracing.Middleware(d.intake.Router(d.ready)),
		ConnState:         d.conns.ConnState,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	go func() { d.serveErr <- d.httpSrv.Serve(d.conns) }()
	log.Info().Str("addr", ln.Addr().String()).Bool("socket_activated", d.activated).Str("program", d.programPath).Msg("listening")
	if mln != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", d.metrics.Handler())
		d.metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { d.serveErr <- d.metricsSrv.Serve(mln) }()
		log.Info().Str("addr", mln.Addr().String()).Msg("metrics listening")
	}

	d.notify.Notify("READY=1\nSTATUS=accepting webhooks")
	return nil
}

// background starts retention, the watchdog and SIGHUP reloads.
func (d *daemon) background(ctx context.Context) {
	log := d.log
	if d.f.retention > 0 {
		d.bg.Add(1)
		go func() {
			defer d.bg.Done()
			d.q.RunRetention(ctx, d.f.retention, func(n int64, err error) {
				if err != nil {
					log.Error().Err(err).Msg("retention pass failed")
					return
				}
				log.Info().Int64("bodies", n).Dur("retention", d.f.retention).Msg("purged bodies of done entries")
			})
		}()
	}
	if every, ok := watchdogInterval(); ok {
		d.bg.Add(1)
		go func() {
			defer d.bg.Done()
			d.notify.runWatchdog(ctx, every, d.alive, log)
		}()
	}
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		d.runHealth(ctx)
	}()
	// Registered before the daemon says it listens: SIGHUP's default
	// action would end the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		d.reloads(ctx, hup)
	}()
}

// alive is what the watchdog pings for: the queue file answers. Not the
// readiness conditions (draining, low disk): a watchdog kill would stop
// handlers mid-call for a condition a restart does not cure.
func (d *daemon) alive(ctx context.Context) error {
	if err := d.q.Ping(ctx); err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	return nil
}

// wait blocks until ctx ends or a server fails.
func (d *daemon) wait(ctx context.Context) error {
	select {
	case err := <-d.serveErr:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
		return nil
	}
}

// adminService is the admin API over the daemon's own files.
func (d *daemon) adminService() *admin.Service {
	svc := &admin.Service{Queue: d.q, State: d.st, Log: d.log.With().Str("component", "admin").Logger(),
		Probe: d.health.Load,
		HasTrigger: func(ref string) bool {
			_, ok := d.current.Load().Program.Lookup(strings.TrimPrefix(ref, "trigger:"))
			return ok
		},
		Keyed: func(e *touba.Delivery) {
			if t, ok := d.current.Load().Program.Lookup(strings.TrimPrefix(e.TriggerRef, "trigger:")); ok {
				t.SetConcurrencyKey(e)
			}
		}}
	if d.disp != nil {
		svc.Wake = d.disp.Notify
	}
	if d.jr != nil {
		svc.Journal = d.jr
		svc.Compensator = func(ctx context.Context, e *touba.Delivery, steps map[string]touba.StepOutput,
			orig *touba.Effect) (*touba.Compensation, error) {
			return dispatcher.Compensate(ctx, d.current.Load(), d.jr, e, steps, orig)
		}
	}
	return svc
}
