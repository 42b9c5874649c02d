package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/handler/egress"
	"github.com/touba/touba-trigger/server"
)

// cliFlags are the flags every operator command shares: where the daemon's
// socket is, and where its files are when no daemon runs (the same flags,
// defaults and TOUBA_<FLAG> variables as serve).
type cliFlags struct {
	adminSocket, queue, state, journal string
	database                           string
	takeOverStaleLock, json            bool
	// For effects compensate without a daemon: the configuration to call
	// the binding with.
	program, manifest string
	// allowUnisolated is serve's --allow-unisolated-handlers, for the
	// handler a compensation starts without a daemon.
	allowUnisolated bool
	// egressDeny is serve's --egress-deny, for the webhook binding a
	// compensation calls without a daemon.
	egressDeny string
}

// addCLIFlags defines the shared flags on fs. The effects commands use
// --state to filter by effect state (SPEC §6), so
// there the state file is --state-file, which defaults to $TOUBA_STATE as
// --state does elsewhere; every command accepts --state-file.
func addCLIFlags(fs *flag.FlagSet, f *cliFlags, stateFileFlag bool) {
	stateDir, runDir := defaultDir("STATE_DIRECTORY"), defaultDir("RUNTIME_DIRECTORY")
	fs.StringVar(&f.adminSocket, "admin-socket", filepath.Join(runDir, defaultAdminSocket), "the daemon's admin socket")
	fs.StringVar(&f.queue, "queue", filepath.Join(stateDir, defaultQueueFile), "queue file, used when no daemon runs")
	stateFile := filepath.Join(stateDir, defaultStateFile)
	if v := os.Getenv("TOUBA_STATE"); v != "" {
		stateFile = v
	}
	if stateFileFlag {
		fs.StringVar(&f.state, "state", stateFile, "state file, used when no daemon runs")
	}
	fs.StringVar(&f.state, "state-file", stateFile, "state file, used when no daemon runs (same as --state)")
	fs.StringVar(&f.journal, "effect-journal", filepath.Join(stateDir, defaultJournalFile), "effect journal, used when no daemon runs")
	fs.StringVar(&f.database, "database", "", "postgres://... : the nodes' database, used when no daemon answers on the socket (instead of the files)")
	fs.BoolVar(&f.takeOverStaleLock, "take-over-stale-lock", false, "when no daemon runs: take over a lock left by a dead process of this host and boot")
	fs.BoolVar(&f.json, "json", false, "print JSON instead of a table")
}

// envFlags are the operator flags that read TOUBA_<FLAG>: where things
// are, as for serve. Filters and verdicts never come from the environment:
// an exported TOUBA_STATUS or TOUBA_RECEIPT_REF must not change what a
// command selects or records.
var envFlags = map[string]bool{"admin-socket": true, "queue": true, "state": true, "state-file": true,
	"effect-journal": true, "database": true, "take-over-stale-lock": true, "json": true, "program": true, "manifest": true,
	"allow-unisolated-handlers": true, "egress-deny": true, "history": true}

// parseCLI parses an operator command's flags; see envFlags. In the
// effects commands --state is a filter, so it never reads TOUBA_STATE.
func parseCLI(fs *flag.FlagSet, args []string, stateIsFilter bool) ([]string, error) {
	var noEnv []string
	fs.VisitAll(func(fl *flag.Flag) {
		if !envFlags[fl.Name] || (stateIsFilter && fl.Name == "state") {
			noEnv = append(noEnv, fl.Name)
		}
	})
	return parseArgs(fs, args, noEnv...)
}

// session is the API a command talks to, and how to let go of it.
type session struct {
	api   admin.API
	who   string // the operator, for the audit trail; "" over the socket, whose peer credentials name it
	close func() error
}

// openSession reaches the daemon on its socket or, when none answers there,
// opens the files under the journal lock (exit 3 when a daemon holds it).
// A read-only command opens them read-only instead, without the lock (SPEC
// §6), unless their schema is older than this build (then it takes the
// lock to migrate them, as before).
func openSession(ctx context.Context, f *cliFlags, stderr io.Writer, readOnly bool) (*session, error) {
	c, err := admin.Dial(f.adminSocket)
	if err == nil {
		return &session{api: c, close: func() error { return nil }}, nil
	} else if !errors.Is(err, admin.ErrNoDaemon) {
		return nil, err
	}
	if readOnly {
		s, err := openFiles(ctx, f, stderr, true)
		if !errors.Is(err, server.ErrSchemaBehind) {
			return s, err
		}
	}
	return openFiles(ctx, f, stderr, false)
}

func openFiles(ctx context.Context, f *cliFlags, stderr io.Writer, readOnly bool) (*session, error) {
	deny, err := egress.ParseList(f.egressDeny)
	if err != nil {
		return nil, usageError{err: fmt.Errorf("--egress-deny: %w", err)}
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: stderr, NoColor: !isTerminal(stderr)}).Level(zerolog.WarnLevel).With().Timestamp().Logger()
	files, err := server.OpenFiles(ctx, server.FilesConfig{Queue: f.queue, State: f.state, Journal: f.journal, Database: f.database,
		TakeOverStaleLock: f.takeOverStaleLock, ReadOnly: readOnly, Program: f.program, Manifest: f.manifest,
		AllowUnisolatedHandlers: f.allowUnisolated, EgressDeny: deny, Log: log, Notes: stderr})
	if errors.Is(err, server.ErrNoFiles) {
		// Never create files an operator only meant to look at.
		return nil, touba.Errorf(touba.EDaemonUnavailable, "no daemon answers on %s and %v; give --admin-socket, or --queue, --state and --effect-journal", f.adminSocket, err)
	} else if err != nil {
		return nil, err
	}
	return &session{api: files.Service, who: files.Operator, close: files.Close}, nil
}

// withSession runs fn with a session and closes it.
func withSession(ctx context.Context, f *cliFlags, stderr io.Writer, fn func(ctx context.Context, api admin.API) error) error {
	return runSession(ctx, f, stderr, false, fn)
}

// withReadSession is withSession for a command that only reads: with no
// daemon, the files are opened read-only and without the journal lock.
func withReadSession(ctx context.Context, f *cliFlags, stderr io.Writer, fn func(ctx context.Context, api admin.API) error) error {
	return runSession(ctx, f, stderr, true, fn)
}

func runSession(ctx context.Context, f *cliFlags, stderr io.Writer, readOnly bool, fn func(ctx context.Context, api admin.API) error) error {
	s, err := openSession(ctx, f, stderr, readOnly)
	if err != nil {
		return err
	}
	if s.who != "" {
		ctx = admin.WithOperator(ctx, s.who)
	}
	err = fn(ctx, s.api)
	return errors.Join(err, s.close())
}

// subcommand splits "queue ls ..." into the verb and its arguments.
func subcommand(group string, args []string, verbs ...string) (string, []string, error) {
	if len(args) == 0 {
		return "", nil, usageError{err: fmt.Errorf("%s needs one of: %v", group, verbs), usage: groupUsage(group)}
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		return "", nil, groupHelp(group)
	}
	for _, v := range verbs {
		if args[0] == v {
			return v, args[1:], nil
		}
	}
	msg := fmt.Sprintf("%s %s: unknown; want one of %v", group, args[0], verbs)
	if near := closest(args[0], verbs); near != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", near)
	}
	return "", nil, usageError{err: errors.New(msg), usage: groupUsage(group)}
}

// operatorVerb starts an operator command: which verb of group it is, and
// its flag set holding the shared flags (addCLIFlags).
func operatorVerb(group string, args []string, stderr io.Writer, stateFileFlag bool, verbs ...string) (string, []string, *flag.FlagSet, *cliFlags, error) {
	verb, args, err := subcommand(group, args, verbs...)
	if err != nil {
		return "", nil, nil, nil, err
	}
	f := &cliFlags{}
	fs := newFlagSet(group+" "+verb, stderr)
	addCLIFlags(fs, f, stateFileFlag)
	return verb, args, fs, f, nil
}
