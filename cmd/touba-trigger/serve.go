package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/journal"
	"github.com/touba/touba-trigger/queue"
	"github.com/touba/touba-trigger/state"
	"github.com/touba/touba-trigger/trigger"
)

// serveFlags are the flags of SPEC §3.
type serveFlags struct {
	manifest, queue, state, journal    string
	listen, metricsListen, adminSocket string
	workers                            int
	maxPending                         int64
	retention, shutdownTimeout         time.Duration
	logLevel, logFormat                string
	takeOverStaleLock                  bool
	logMaxRows, logMaxBodyBytes        int64
	logMaxAge                          time.Duration
}

func parseServe(args []string, stderr io.Writer) (string, *serveFlags, error) {
	f := &serveFlags{}
	stateDir, runDir := defaultDir("STATE_DIRECTORY"), defaultDir("RUNTIME_DIRECTORY")
	fs := newFlagSet("serve", stderr)
	fs.StringVar(&f.manifest, "manifest", "", "the touba-manifest-v1 file (required)")
	fs.StringVar(&f.queue, "queue", filepath.Join(stateDir, "touba.trigger-queue.sqlite"), "queue file")
	fs.StringVar(&f.state, "state", filepath.Join(stateDir, "touba.triggers.sqlite"), "state file (run checkpoints, delivery log)")
	fs.StringVar(&f.journal, "effect-journal", filepath.Join(stateDir, "touba.effect-journal.sqlite"), "effect journal file; empty for none")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "HTTP address for webhooks")
	fs.StringVar(&f.metricsListen, "metrics-listen", "127.0.0.1:9464", "HTTP address for /metrics; empty to disable")
	fs.StringVar(&f.adminSocket, "admin-socket", filepath.Join(runDir, "admin.sock"), "admin unix socket (mode 0600)")
	fs.IntVar(&f.workers, "workers", 4, "dispatcher workers; 0 runs intake only")
	fs.Int64Var(&f.maxPending, "max-pending", 1_000_000, "pending entries above which intake answers 503")
	fs.DurationVar(&f.retention, "retention", 168*time.Hour, "how long bodies of done entries are kept")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "time running handlers get at shutdown")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "json", "json or console")
	fs.BoolVar(&f.takeOverStaleLock, "take-over-stale-lock", false, "take over a journal lock left by a dead process of this host and boot")
	fs.Int64Var(&f.logMaxRows, "delivery-log-max-rows", 1_000_000, "delivery log rows kept (oldest pruned first)")
	fs.DurationVar(&f.logMaxAge, "delivery-log-max-age", 168*time.Hour, "delivery log rows older than this are pruned")
	fs.Int64Var(&f.logMaxBodyBytes, "delivery-log-max-body-bytes", 256<<20, "stored rejected bodies kept, in bytes (oldest dropped first)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return "", nil, err
	}
	if len(pos) != 1 {
		return "", nil, usageError{fmt.Errorf("serve takes one PROGRAM file, got %d", len(pos))}
	}
	// --workers 0 runs intake only (no dispatcher): for benchmarks and for
	// holding deliveries while handlers are being fixed.
	if f.workers < 0 || f.maxPending < 1 {
		return "", nil, usageError{errors.New("--workers must be 0 or more and --max-pending at least 1")}
	}
	return pos[0], f, nil
}

func newLogger(level, format string, w io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Nop(), usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", level)}
	}
	switch format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	default:
		return zerolog.Nop(), usageError{fmt.Errorf("--log-format %q: want json or console", format)}
	}
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// runServe runs the daemon until ctx ends, then drains and exits cleanly.
func runServe(ctx context.Context, args []string, _ io.Writer, stderr io.Writer) error {
	programPath, f, err := parseServe(args, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(f.logLevel, f.logFormat, stderr)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(programPath, f.manifest)
	if err != nil {
		return err
	}
	stubs := &dispatcher.Stubs{}
	dcfg, err := dispatcher.NewConfig(cfg.program, cfg.manifest, cfg.resolved, f.journal != "", stubs, log)
	if err != nil {
		return err
	}

	// The journal lock comes first: it is what keeps a second daemon off
	// these files.
	var jr *journal.Journal
	if f.journal != "" {
		lock, err := journal.AcquireLock(f.journal, journal.LockOptions{TakeOverStale: f.takeOverStaleLock})
		if err != nil {
			return err
		}
		defer lock.Release()
		if lock.TookOver != nil {
			log.Warn().Str("previous_holder", lock.TookOver.String()).Msg("took over a stale journal lock")
		}
		jr, err = journal.Open(ctx, f.journal, journal.Options{Secrets: cfg.secrets, Log: log})
		if err != nil {
			return err
		}
		defer jr.Close()
		recovered, err := jr.Recover(ctx)
		if err != nil {
			return fmt.Errorf("journal recovery: %w", err)
		}
		for _, e := range recovered {
			log.Warn().Str("event", "effect.unknown").Str("queue_id", e.Scope).Str("effect_id", e.EffectID).
				Str("retry_mode", e.RetryMode).Msg("effect was dispatched when the daemon stopped; its outcome is unknown")
		}
	}

	q, err := queue.Open(ctx, f.queue, queue.Options{MaxPending: f.maxPending})
	if err != nil {
		return err
	}
	defer q.Close()
	st, err := state.Open(ctx, f.state, state.Options{LogMaxRows: f.logMaxRows, LogMaxAge: f.logMaxAge,
		LogMaxBodyBytes: f.logMaxBodyBytes, Log: log.With().Str("component", "deliverylog").Logger()})
	if err != nil {
		return err
	}
	defer st.Close()
	if n, err := st.InterruptRuns(ctx); err != nil {
		return err
	} else if n > 0 {
		log.Warn().Int64("runs", n).Msg("runs interrupted by a crash")
	}

	var disp *dispatcher.Dispatcher
	if f.workers > 0 {
		var j dispatcher.Journal
		if jr != nil {
			j = jr
		}
		disp = dispatcher.New(q, st, j, dcfg, dispatcher.Options{Workers: f.workers,
			Log: log.With().Str("component", "dispatcher").Logger()})
		if err := disp.Start(ctx); err != nil {
			return err
		}
	}

	intake := &trigger.Intake{Queue: q, Log: st, Logger: log.With().Str("component", "intake").Logger()}
	if disp != nil {
		intake.Enqueued = disp.Notify
	}
	intake.SetConfig(cfg.intake)
	ready := func(ctx context.Context) error {
		if err := q.Ping(ctx); err != nil {
			return fmt.Errorf("queue: %w", err)
		}
		return nil
	}
	srv := &http.Server{
		Handler:           intake.Router(ready),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          nil,
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", f.listen, err)
	}
	log.Info().Str("addr", ln.Addr().String()).Str("program", programPath).Msg("listening")

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			next, err := loadConfig(programPath, f.manifest)
			var nd *dispatcher.Config
			if err == nil {
				nd, err = dispatcher.NewConfig(next.program, next.manifest, next.resolved, jr != nil, stubs, log)
			}
			if err != nil {
				log.Error().Err(err).Msg("reload refused; keeping the running configuration")
				continue
			}
			intake.SetConfig(next.intake)
			if disp != nil {
				disp.SetConfig(nd)
			}
			log.Info().Msg("configuration reloaded")
		}
	}()

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	select {
	case err := <-serveErr:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	log.Info().Msg("shutting down")
	intake.Drain()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn().Err(err).Msg("http shutdown did not finish in time")
	}
	if disp != nil {
		disp.Close(f.shutdownTimeout)
	}
	if err := errors.Join(q.Close(), st.Close()); err != nil {
		return err
	}
	log.Info().Msg("stopped")
	return nil
}
