package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/touba/touba-trigger/cli"
	"github.com/touba/touba-trigger/server"
)

// runJournal is `touba-trigger journal unlock --effect-journal FILE`: it
// removes a lock record left by a process that died, after the checks of a
// take-over (this host, this boot, its pid gone); a live holder is refused
// with exit 3.
func runJournal(_ context.Context, args []string, stdout, stderr io.Writer) error {
	verb, args, err := usage.Verb("journal", args, "unlock")
	if err != nil {
		return err
	}
	fs := usage.FlagSet("journal "+verb, stderr)
	path := fs.String("effect-journal", filepath.Join(cli.DefaultDir("STATE_DIRECTORY"), cli.DefaultJournalFile), "the effect journal whose lock to remove")
	pos, err := cli.Parse(fs, args)
	if err != nil {
		return err
	} else if len(pos) > 0 {
		return cli.Usagef("journal unlock takes no arguments, got %q", pos)
	}
	if *path == "" {
		return cli.UsageError{Err: errors.New("--effect-journal is required")}
	}
	rec, err := server.UnlockJournal(*path)
	if err != nil {
		return err
	}
	if rec == nil {
		fmt.Fprintf(stdout, "no lock record at %s\n", server.JournalLockPath(*path))
		return nil
	}
	fmt.Fprintf(stdout, "removed the lock record of %s from %s\n", rec, server.JournalLockPath(*path))
	return nil
}
