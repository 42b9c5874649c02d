// Command touba-trigger is the webhook ingestion daemon and its operator
// CLI: serve, check, version, and the queue, deliveries, effects and
// journal commands that talk to a running daemon or to its files.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	touba "github.com/touba/touba-trigger"
)

// Exit codes of SPEC §3.
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
	exitLocked  = 3
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(Run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// Run runs one subcommand and returns its exit code. Tests call it in
// process.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	var err error
	switch args[0] {
	case "serve":
		err = runServe(ctx, args[1:], stdout, stderr)
	case "check":
		err = runCheck(ctx, args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "touba-trigger", Version)
	case "help", "-h", "--help":
		usage(stdout)
	default:
		fmt.Fprintf(stderr, "touba-trigger: unknown command %q\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return exitCode(err, stderr)
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  touba-trigger serve PROGRAM --manifest FILE [--queue FILE] [--state FILE] [--effect-journal FILE] [flags]
  touba-trigger check PROGRAM --manifest FILE
  touba-trigger version
Run "touba-trigger serve -h" for the flags. Every flag also reads TOUBA_<FLAG> from the environment.
`)
}

// usageError marks bad usage or configuration: exit 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	fmt.Fprintln(stderr, "touba-trigger:", err)
	var ue usageError
	switch code := touba.ErrorCode(err); {
	case code == touba.EJournalLocked || code == touba.EJournalLockStale:
		return exitLocked
	case errors.As(err, &ue), code == touba.ECONFIG, code == touba.EEffectJournalRequired:
		return exitUsage
	}
	return exitRuntime
}
