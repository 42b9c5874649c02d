package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/cli"
	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/expr"
	"github.com/touba/touba-trigger/handler/egress"
	"github.com/touba/touba-trigger/server"
	"github.com/touba/touba-trigger/tracing"
	"github.com/touba/touba-trigger/trigger"
)

// ServeCommand is `serve` (SPEC §3): its flags fill a server.Config.
type ServeCommand struct {
	cfg                 server.Config
	logLevel, logFormat string
}

// ParseFlags reads the flags and the PROGRAM argument.
func (c *ServeCommand) ParseFlags(args []string, stderr io.Writer) error {
	f := &c.cfg
	stateDir, runDir := cli.DefaultDir("STATE_DIRECTORY"), cli.DefaultDir("RUNTIME_DIRECTORY")
	fs := usage.FlagSet("serve", stderr)
	fs.StringVar(&f.Manifest, "manifest", "", "the touba-manifest-v1 file (required)")
	fs.Uint64Var(&f.ExpressionCostLimit, "expression-cost-limit", expr.DefaultCostLimit, "bound of every CEL expression's cost: its static estimate at load and its evaluation at run time")
	fs.StringVar(&f.Queue, "queue", filepath.Join(stateDir, cli.DefaultQueueFile), "queue file")
	fs.StringVar(&f.State, "state", filepath.Join(stateDir, cli.DefaultStateFile), "state file (run checkpoints, delivery log)")
	fs.StringVar(&f.Journal, "effect-journal", filepath.Join(stateDir, cli.DefaultJournalFile), "effect journal file; empty for none")
	fs.StringVar(&f.Listen, "listen", "127.0.0.1:8080", "HTTP address for webhooks (unused under socket activation)")
	fs.StringVar(&f.MetricsListen, "metrics-listen", "127.0.0.1:9464", "HTTP address for /metrics; empty to disable")
	fs.StringVar(&f.AdminSocket, "admin-socket", filepath.Join(runDir, cli.DefaultAdminSocket), "admin unix socket (mode 0600); empty to disable")
	fs.IntVar(&f.Workers, "workers", dispatcher.DefaultWorkers, "runs in progress at once (dispatcher workers); 0 runs intake only")
	fs.Int64Var(&f.MaxPending, "max-pending", 1_000_000, "pending entries above which intake answers 503")
	fs.DurationVar(&f.Retention, "retention", 168*time.Hour, "how long bodies of done entries are kept; 0 keeps them")
	fs.DurationVar(&f.History, "history", touba.DefaultHistory, "finished entries whose last change is older than this are forgotten, with their runs and effects; 0 keeps everything")
	fs.DurationVar(&f.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "time running handlers get at shutdown")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "json", "json or console")
	fs.BoolVar(&f.TakeOverStaleLock, "take-over-stale-lock", false, "take over a journal lock left by a dead process of this host and boot")
	fs.Int64Var(&f.LogMaxRows, "delivery-log-max-rows", 1_000_000, "delivery log rows kept (oldest pruned first)")
	fs.DurationVar(&f.LogMaxAge, "delivery-log-max-age", 168*time.Hour, "delivery log rows older than this are pruned")
	fs.Int64Var(&f.LogMaxBodyBytes, "delivery-log-max-body-bytes", 256<<20, "stored rejected bodies kept, in bytes (oldest dropped first)")
	proxies := fs.String("trusted-proxies", "", "CIDRs of proxies whose X-Forwarded-For (source.allow_from, the console's login throttle) and X-Forwarded-Proto (the console's Secure cookie) are believed, comma-separated")
	fs.Int64Var(&f.LogMaxBytes, "delivery-log-max-bytes", 1<<30, "delivery log size, every column counted, in bytes (oldest rows pruned first)")
	fs.StringVar(&f.Database, "database", "", "postgres://... : keep every store in this PostgreSQL database, shared with other nodes (instead of the files)")
	fs.StringVar(&f.NodeID, "node-id", "", "this node's name in leases, audit events and metrics (with --database); default hostname:pid")
	fs.DurationVar(&f.LeaseTTL, "lease-ttl", 60*time.Second, "how long a node's lease of an entry lasts unrenewed (with --database); at least every binding's timeout plus 5s")
	fs.DurationVar(&f.DatabaseTimeout, "database-timeout", 5*time.Second, "bound of every wait on the database (with --database): a request that cannot commit within it is answered 503")
	fs.StringVar(&f.ConsoleListen, "console-listen", "", "address of the operator console (keep it on loopback or behind a TLS proxy); off unless given")
	fs.BoolVar(&f.AllowUnisolatedHandlers, "allow-unisolated-handlers", false, "where this host cannot run a process handler without network, run the bindings without the network grant with the host's network (logged at every start) instead of refusing to start")
	egressDeny := fs.String("egress-deny", "", "CIDRs the webhook and http bindings must never reach (for example 10.0.0.0/8,172.16.0.0/12,192.168.0.0/16), comma-separated, on top of the link-local, metadata, multicast and reserved ranges always refused; a binding's options.allow_addresses still allows its own")
	tokenFile := fs.String("console-token-file", "", "file holding the console's token; default: the systemd credential console-token")
	pos, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if f.ConsoleListen != "" {
		if f.ConsoleToken, err = server.LoadConsoleToken(*tokenFile); err != nil {
			return err
		}
	}
	if f.TrustedProxies, err = trigger.ParseCIDRList(*proxies); err != nil {
		return cli.Usagef("--trusted-proxies: %w", err)
	}
	if f.EgressDeny, err = egress.ParseList(*egressDeny); err != nil {
		return cli.Usagef("--egress-deny: %w", err)
	}
	if len(pos) != 1 {
		return cli.Usagef("serve takes one PROGRAM file, got %d", len(pos))
	}
	f.Program = pos[0]
	// --workers 0 runs intake only (no dispatcher): for benchmarks and for
	// holding deliveries while handlers are being fixed.
	if f.Workers < 0 || f.MaxPending < 1 {
		return cli.Usagef("--workers must be 0 or more and --max-pending at least 1")
	}
	if f.Database != "" && (f.LeaseTTL <= 0 || f.DatabaseTimeout <= 0) {
		return cli.Usagef("--lease-ttl and --database-timeout must be positive")
	}
	if f.Retention < 0 || f.ShutdownTimeout < 0 || f.History < 0 {
		return cli.Usagef("--retention, --history and --shutdown-timeout must not be negative")
	}
	return nil
}

// runServe runs the daemon until ctx ends, then drains and exits cleanly
// (SPEC §3.3).
func runServe(ctx context.Context, args []string, _ io.Writer, stderr io.Writer) error {
	// First, before any secret is read: a handler runs as the daemon's
	// user and must not read them from /proc/<pid>/environ or mem.
	if err := server.Harden(); err != nil {
		return touba.Errorf(touba.EINTERNAL, "%v", err)
	}
	c := &ServeCommand{}
	if err := c.ParseFlags(args, stderr); err != nil {
		return err
	}
	return c.Run(ctx, stderr)
}

// Run runs the daemon until ctx ends, then drains it.
func (c *ServeCommand) Run(ctx context.Context, stderr io.Writer) error {
	log, err := cli.NewLogger(c.logLevel, c.logFormat, stderr)
	if err != nil {
		return err
	}
	// Tracing is set up first and shut down last: spans of the final drain
	// are flushed after the files are closed, and before "stopped", so that
	// line is the last one a clean stop writes.
	tr, err := tracing.Setup(ctx, Version, log)
	if err != nil {
		return err
	}
	flushed := false
	flushTraces := func() {
		if flushed {
			return
		}
		flushed = true
		if err := tr.Shutdown(5 * time.Second); err != nil {
			log.Warn().Err(err).Msg("trace flush at shutdown failed")
		}
	}
	defer flushTraces()
	if tr.Enabled() {
		log = log.Hook(tracing.LogHook{})
	}
	c.cfg.Log, c.cfg.Tracing = log, tr
	stopPprof, err := server.StartPprof(log)
	if err != nil {
		return err
	}
	defer stopPprof()
	srv, err := server.Open(ctx, c.cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	go func() {
		<-ctx.Done()
		forceExitOnSecondSignal(log)
	}()
	serveErr := srv.Run(ctx)
	if err := srv.Close(); err != nil {
		return err
	}
	if serveErr != nil {
		return serveErr
	}
	flushTraces()
	log.Info().Msg("stopped")
	return nil
}

// forceExitOnSecondSignal makes a second SIGTERM or SIGINT during the
// drain exit at once (code 1). The journal's lock record then stays, and
// the next start needs --take-over-stale-lock, as after a crash.
func forceExitOnSecondSignal(log zerolog.Logger) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		sig := <-ch
		log.Error().Str("signal", sig.String()).Msg("second signal during shutdown; exiting now")
		os.Exit(cli.ExitRuntime)
	}()
}
