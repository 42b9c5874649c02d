package server

import (
	"context"
	"os"
	"os/signal"
	"time"

	"github.com/touba/touba-trigger/dispatcher"
)

// Shutdown is the drain of SPEC §3.3: /readyz fails, intake stops taking
// requests, in-flight requests finish, the dispatcher stops leasing and
// gives running handlers --shutdown-timeout.
//
// Under socket activation the listening socket belongs to systemd and
// outlives this process: the listener is closed first, so new connections
// wait in the socket's backlog for the next instance instead of being
// answered 503, and every request already accepted is answered normally.
// Without it, requests still arriving on accepted connections get 503.
func (s *Server) Shutdown(ctx context.Context) {
	s.stopping.Store(true)
	s.stopScheduler()
	// One deadline for everything: the HTTP drain and the handlers' grace
	// run at the same time, so a stop never takes two timeouts.
	s.deadline = time.Now().Add(s.cfg.ShutdownTimeout)
	if s.disp != nil {
		s.disp.StopLeasing()
	}
	// Open takes answer now with what they have, so the HTTP drain does
	// not wait out their long polls; answers to calls in flight are still
	// taken until the listener closes.
	s.workerHub().Close()
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), s.deadline)
	defer cancel()
	if s.httpSrv != nil {
		if !s.activated {
			s.intake.Drain()
		}
		if err := s.conns.drain(sctx, s.httpSrv); err != nil {
			s.log.Warn().Err(err).Msg("http shutdown did not finish in time")
		}
		s.intake.Drain()
	}
	s.stopServers()
}

// stopServers stops what start started, in order: the dispatcher (with its
// grace), then the admin socket (operators can look until the end), the
// metrics listener and the background work. Idempotent.
func (s *Server) stopServers() {
	s.stopScheduler()
	if s.httpSrv != nil {
		// After a graceful Shutdown this only makes sure on error paths.
		s.httpSrv.Close()
	}
	if s.disp != nil {
		grace := s.cfg.ShutdownTimeout
		if !s.deadline.IsZero() {
			grace = max(time.Until(s.deadline), 0)
		}
		s.disp.Close(grace)
	}
	s.current.Load().CloseRunners(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s.adminSrv != nil {
		if err := s.adminSrv.Close(ctx); err != nil {
			s.log.Warn().Err(err).Msg("admin socket shutdown did not finish in time")
		}
	}
	if s.metricsSrv != nil {
		s.metricsSrv.Shutdown(ctx)
	}
	s.stopConsole(ctx)
	if s.bgCancel != nil {
		s.bgCancel()
	}
	s.bg.Wait()
}

// reloads reloads the program and manifest on SIGHUP (SPEC §3.3): an
// invalid new configuration is logged and the running one kept.
func (s *Server) reloads(ctx context.Context, hup chan os.Signal) {
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		next, err := LoadConfig(s.cfg.Program, s.cfg.Manifest, s.cfg.ExpressionCostLimit)
		if err == nil {
			err = checkIsolation(next.Manifest, s.cfg.AllowUnisolatedHandlers, s.log)
		}
		var nd *dispatcher.Config
		if err == nil {
			nd, err = dispatcher.NewConfig(next.Program, next.Manifest, next.Resolved, s.store.Journal != nil, s.stubs,
				dispatcher.Outbound{EgressDeny: s.cfg.EgressDeny}, s.log)
		}
		if err != nil {
			s.log.Error().Err(err).Msg("reload refused; keeping the running configuration")
			continue
		}
		s.install(next, nd)
		s.log.Info().Msg("configuration reloaded")
	}
}

// install puts a reloaded configuration in force. The secrets only grow:
// every check (the journal's, the dispatcher's filter of handler errors
// and receipts, intake's kept headers) uses the union of every value
// loaded since start, since a value dropped from the configuration may
// still be echoed by a remote or sit in a request in flight.
func (s *Server) install(next *Loaded, nd *dispatcher.Config) {
	s.secrets.Merge(next.Secrets)
	nd.Secrets = s.secrets
	if next.Intake != nil {
		next.Intake.Secrets = s.secrets
	}
	// The dispatcher first: an entry the new intake accepts must find its
	// trigger there.
	old := s.current.Swap(nd)
	if s.disp != nil {
		s.disp.SetConfig(nd)
	}
	s.listenToHeldKeys(next.Program)
	s.gatheringTriggers(next.Program)
	s.intake.SetConfig(next.Intake)
	if s.sched != nil && next.Program != nil {
		s.sched.SetSpecs(scheduleSpecs(next.Program))
	}
	old.CloseRunners(nd)
}
