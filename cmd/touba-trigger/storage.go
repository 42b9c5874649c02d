package main

import (
	"context"
	"io"

	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/cli"
	"github.com/touba/touba-trigger/report"
)

// runStorage is `touba-trigger storage` (SPEC §6, §8.1): the size of each
// file or table, the oldest entries, and what a --history pass would
// forget now; the running daemon's window and its last pass, or, with no
// daemon, the files' measure under --history.
func runStorage(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := &cli.Operator{}
	fs := usage.FlagSet("storage", stderr)
	f.Define(fs, true)
	var req admin.StorageRequest
	fs.DurationVar(&req.History, "history", 0, "the window to count what a pass forgets with (default: the daemon's --history; with no daemon, 2160h)")
	pos, err := f.Parse(fs, args)
	if err != nil {
		return err
	} else if len(pos) > 0 {
		return cli.Usagef("storage takes no arguments, got %q", pos)
	}
	if req.History < 0 {
		return cli.Usagef("--history %s: must not be negative (0: the daemon's)", req.History)
	}
	return f.ReadSession(ctx, stderr, func(ctx context.Context, api admin.API) error {
		rep, err := api.Storage(ctx, req)
		return report.Answer(stdout, f.JSON, rep, err, report.Storage)
	})
}
