package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"time"

	"github.com/touba/touba-trigger/dispatcher"
)

// shutdown is the drain of SPEC §3.3: /readyz fails, intake stops taking
// requests, in-flight requests finish, the dispatcher stops leasing and
// gives running handlers --shutdown-timeout.
//
// Under socket activation the listening socket belongs to systemd and
// outlives this process: the listener is closed first, so new connections
// wait in the socket's backlog for the next instance instead of being
// answered 503, and every request already accepted is answered normally.
// Without it, requests still arriving on accepted connections get 503.
func (d *daemon) shutdown(ctx context.Context) {
	d.stopping.Store(true)
	// One deadline for everything: the HTTP drain and the handlers' grace
	// run at the same time, so a stop never takes two timeouts.
	d.deadline = time.Now().Add(d.f.shutdownTimeout)
	if d.disp != nil {
		d.disp.StopLeasing()
	}
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), d.deadline)
	defer cancel()
	if d.httpSrv != nil {
		if !d.activated {
			d.intake.Drain()
		}
		if err := d.conns.drain(sctx, d.httpSrv); err != nil {
			d.log.Warn().Err(err).Msg("http shutdown did not finish in time")
		}
		d.intake.Drain()
	}
	d.stopServers()
}

// stopServers stops what start started, in order: the dispatcher (with its
// grace), then the admin socket (operators can look until the end), the
// metrics listener and the background work. Idempotent.
func (d *daemon) stopServers() {
	if d.httpSrv != nil {
		// After a graceful Shutdown this only makes sure on error paths.
		d.httpSrv.Close()
	}
	if d.disp != nil {
		grace := d.f.shutdownTimeout
		if !d.deadline.IsZero() {
			grace = max(time.Until(d.deadline), 0)
		}
		d.disp.Close(grace)
	}
	d.current.Load().CloseRunners(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if d.adminSrv != nil {
		if err := d.adminSrv.Close(ctx); err != nil {
			d.log.Warn().Err(err).Msg("admin socket shutdown did not finish in time")
		}
	}
	if d.metricsSrv != nil {
		d.metricsSrv.Shutdown(ctx)
	}
	if d.bgCancel != nil {
		d.bgCancel()
	}
	d.bg.Wait()
}

// close stops everything still running and closes the files and the lock,
// last opened first. Idempotent; the first call's error is kept.
func (d *daemon) close() error {
	d.closeOnce.Do(func() {
		d.stopServers()
		var errs []error
		for i := len(d.closers) - 1; i >= 0; i-- {
			errs = append(errs, d.closers[i]())
		}
		d.closeErr = errors.Join(errs...)
	})
	return d.closeErr
}

// reloads reloads the program and manifest on SIGHUP (SPEC §3.3): an
// invalid new configuration is logged and the running one kept.
func (d *daemon) reloads(ctx context.Context, hup chan os.Signal) {
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		next, err := loadConfig(d.programPath, d.f.manifest)
		var nd *dispatcher.Config
		if err == nil {
			nd, err = dispatcher.NewConfig(next.program, next.manifest, next.resolved, d.jr != nil, d.stubs, d.log)
		}
		if err != nil {
			d.log.Error().Err(err).Msg("reload refused; keeping the running configuration")
			continue
		}
		d.install(next, nd)
		d.log.Info().Msg("configuration reloaded")
	}
}

// install puts a reloaded configuration in force. The secrets only grow:
// every check (the journal's, the dispatcher's filter of handler errors
// and receipts, intake's kept headers) uses the union of every value
// loaded since start, since a value dropped from the configuration may
// still be echoed by a remote or sit in a request in flight.
func (d *daemon) install(next *config, nd *dispatcher.Config) {
	d.secrets.Merge(next.secrets)
	nd.Secrets = d.secrets
	if next.intake != nil {
		next.intake.Secrets = d.secrets
	}
	// The dispatcher first: an entry the new intake accepts must find its
	// trigger there.
	old := d.current.Swap(nd)
	if d.disp != nil {
		d.disp.SetConfig(nd)
	}
	d.intake.SetConfig(next.intake)
	old.CloseRunners(nd)
}
