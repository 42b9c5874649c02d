package main

import (
	"flag"
	"io"
	"runtime/debug"

	"github.com/touba/touba-trigger/cli"
)

// Version is the release version, set by scripts/release (and
// scripts/install) with -ldflags "-X main.Version=...". At start-up it is
// replaced by the resolved version (see cli.BuildVersion), so that every
// user of it (the version command, the traces' service.version) sees the
// same.
var Version = ""

// ldflagsVersion keeps the value the linker set, before init resolves
// Version.
var ldflagsVersion string

func init() {
	ldflagsVersion = Version
	bi, _ := debug.ReadBuildInfo()
	Version = cli.BuildVersion(bi, ldflagsVersion).Version
}

// runVersion is `touba-trigger version [--json]` (and `--version`).
func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return cli.UsageError{Err: err}
	}
	if fs.NArg() > 0 {
		return cli.Usagef("version takes no arguments (got %q)", fs.Arg(0))
	}
	bi, _ := debug.ReadBuildInfo()
	return cli.PrintVersion(stdout, cli.BuildVersion(bi, ldflagsVersion), *asJSON)
}
