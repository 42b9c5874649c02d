package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/internal/systemd"
)

// Run starts the daemon, serves until ctx ends or a server fails, then
// drains (Shutdown). Close must still be called.
func (s *Server) Run(ctx context.Context) error {
	if err := s.start(ctx); err != nil {
		return err
	}
	serveErr := s.wait(ctx)
	s.log.Info().Msg("shutting down")
	s.notify.Notify("STOPPING=1")
	s.Shutdown(ctx)
	return serveErr
}

// start runs the dispatcher, the admin socket, the listeners and the
// background work, then tells systemd the daemon is ready.
func (s *Server) start(ctx context.Context) error {
	f, log := s.cfg, s.log
	if f.Workers > 0 {
		var j dispatcher.Journal
		if s.store.Journal != nil {
			j = s.store.Journal
		}
		var renew, leaseTTL time.Duration
		if s.store.Shared {
			renew = f.LeaseTTL / 3 // two renewals may fail before the lease ends
			leaseTTL = f.LeaseTTL
		}
		// The queue keeps the durable steps' waits (SPEC §2.3); asserted,
		// not required, so a store without them still runs tool steps.
		waits, _ := s.store.Queue.(touba.WaitStore)
		s.disp = dispatcher.New(s.store.Queue, s.store.State, j, s.current.Load(), dispatcher.Options{Workers: f.Workers,
			Log: log.With().Str("component", "dispatcher").Logger(), Observe: s.metrics.ObserveCall,
			Tracing: s.tracing, RenewEvery: renew, LeaseTTL: leaseTTL, Slots: s.store.Slots,
			Circuits: s.store.Circuits, OnCircuit: s.onCircuit, Waits: waits})
		s.intake.Enqueued = s.disp.Notify
		s.workerHub().Room = s.disp.Notify
	}
	if f.AdminSocket != "" {
		srv, err := admin.Listen(f.AdminSocket, s.adminService())
		if err != nil {
			return err
		}
		s.adminSrv = srv
		go func() {
			if err := srv.Serve(); err != nil {
				log.Error().Err(err).Msg("admin socket stopped")
			}
		}()
	}
	if err := s.startConsole(); err != nil {
		return err
	}
	ln, mln := s.stopWaiting()
	if ln == nil {
		var err error
		if ln, mln, err = s.listen(); err != nil {
			return err
		}
	}
	// The dispatcher starts once every socket is bound: a port in use
	// then stops the daemon before any handler was called.
	if s.disp != nil {
		if err := s.disp.Start(ctx); err != nil {
			ln.Close()
			if mln != nil {
				mln.Close()
			}
			return err
		}
	}
	bgCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.bgCancel = cancel
	// The first health check before the first /readyz; then in the
	// background (runHealth).
	s.health.Store(s.checkHealth(ctx))
	s.background(bgCtx)
	s.sched.Start(bgCtx)
	s.serve(ln, mln)
	close(s.ready)
	s.notify.Notify("READY=1\nSTATUS=accepting webhooks")
	return nil
}

// listen takes the listeners systemd passed, or binds --listen and
// --metrics-listen.
func (s *Server) listen() (ln, mln net.Listener, err error) {
	acts, err := systemd.Listeners(s.log)
	if err != nil {
		return nil, nil, err
	}
	ln = acts.Take("http")
	s.activated = ln != nil
	if ln == nil {
		if ln, err = net.Listen("tcp", s.cfg.Listen); err != nil {
			return nil, nil, fmt.Errorf("listen %s: %w", s.cfg.Listen, err)
		}
	}
	mln = acts.Take("metrics")
	for name, extra := range acts {
		s.log.Warn().Str("name", name).Msg("activated socket with an unknown name; closed")
		extra.Close()
	}
	if mln == nil && s.cfg.MetricsListen != "" {
		if mln, err = net.Listen("tcp", s.cfg.MetricsListen); err != nil {
			ln.Close()
			return nil, nil, fmt.Errorf("metrics listen %s: %w", s.cfg.MetricsListen, err)
		}
	}
	return ln, mln, nil
}

// serve starts the HTTP servers on their listeners.
func (s *Server) serve(ln, mln net.Listener) {
	s.serveErr = make(chan error, 2)
	s.conns = newConnTracker(ln)
	s.httpAddr = ln.Addr()
	s.httpSrv = &http.Server{
		Handler:           s.tracing.Middleware(s.withWorkers(s.intake.Router(s.readyz))),
		ConnState:         s.conns.ConnState,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	go func() { s.serveErr <- s.httpSrv.Serve(s.conns) }()
	s.log.Info().Str("addr", ln.Addr().String()).Bool("socket_activated", s.activated).Str("program", s.cfg.Program).Msg("listening")
	if mln != nil {
		s.metAddr = mln.Addr()
		mux := http.NewServeMux()
		mux.Handle("/metrics", s.metrics.Handler())
		s.metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { s.serveErr <- s.metricsSrv.Serve(mln) }()
		s.log.Info().Str("addr", mln.Addr().String()).Msg("metrics listening")
	}
}

// background starts retention, the watchdog, the health checks and SIGHUP
// reloads.
func (s *Server) background(ctx context.Context) {
	log := s.log
	if s.cfg.Retention > 0 {
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			s.store.Queue.RunRetention(ctx, s.cfg.Retention, func(n int64, err error) {
				if err != nil {
					log.Error().Err(err).Msg("retention pass failed")
					return
				}
				log.Info().Int64("bodies", n).Dur("retention", s.cfg.Retention).Msg("purged bodies of done entries")
			})
		}()
	}
	if s.store.Workers != nil {
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			s.recordWorkers(ctx)
		}()
	}
	if s.history != nil {
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			s.history.run(ctx)
		}()
	}
	if every, ok := systemd.WatchdogInterval(); ok {
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			s.notify.RunWatchdog(ctx, every, s.alive, log)
		}()
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		s.runHealth(ctx)
	}()
	// Registered before the daemon says it listens: SIGHUP's default
	// action would end the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		s.reloads(ctx, hup)
	}()
}

// alive is what the watchdog pings for: the queue file answers. Not the
// readiness conditions (draining, low disk): a watchdog kill would stop
// handlers mid-call for a condition a restart does not cure.
func (s *Server) alive(ctx context.Context) error {
	if err := s.store.Queue.Ping(ctx); err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	return nil
}

// wait blocks until ctx ends or a server fails.
func (s *Server) wait(ctx context.Context) error {
	select {
	case err := <-s.serveErr:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
		return nil
	}
}
