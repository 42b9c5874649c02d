package main

import (
	"context"
	"io"

	"github.com/touba/touba-trigger/cli"
	"github.com/touba/touba-trigger/worker"
)

// runListen is `touba-trigger listen` (SPEC §4.3): a worker for a
// developer's laptop (worker.Listen).
func runListen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := usage.FlagSet("listen", stderr)
	var c worker.ListenConfig
	fs.StringVar(&c.URL, "url", "", "the daemon's base URL (its --listen address)")
	fs.StringVar(&c.TokenFile, "token-file", "", "file holding the worker binding's token")
	fs.Var((*cli.Strings)(&c.Tools), "tool", "a worker binding's tool ref to take calls of (repeatable)")
	fs.StringVar(&c.ForwardTo, "forward-to", "", "local URL each call's input is POSTed to")
	fs.StringVar(&c.Secret, "signing-secret", "", "Standard Webhooks secret (whsec_...); generated and printed when empty")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", 1, "calls forwarded at once (1 keeps the daemon's order)")
	if err := fs.Parse(args); err != nil {
		return cli.UsageError{Err: err}
	}
	if c.URL == "" || c.TokenFile == "" || len(c.Tools) == 0 || c.ForwardTo == "" || fs.NArg() > 0 {
		return cli.Usagef("listen needs --url, --token-file, --tool and --forward-to")
	}
	if err := c.Check(); err != nil {
		return cli.Usagef("%v", err)
	}
	return worker.Listen(ctx, c, stdout)
}
