package main

import (
	"context"
	"io"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/cli"
	"github.com/touba/touba-trigger/expr"
	"github.com/touba/touba-trigger/server"
	"github.com/touba/touba-trigger/summary"
)

// runCheck validates a program and its manifest and prints a summary.
func runCheck(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := usage.FlagSet("check", stderr)
	manifestPath := fs.String("manifest", "", "the touba-manifest-v1 file")
	costLimit := fs.Uint64("expression-cost-limit", expr.DefaultCostLimit, "serve's --expression-cost-limit: the bound every CEL expression's static cost estimate must fit")
	history := fs.Duration("history", touba.DefaultHistory, "serve's --history, to warn where it is shorter than a wait_for timeout or twice a schedule's period")
	// Accepted as serve's, as it was: a schedule catches up from its
	// cursor, which --history never forgets, so it warns of nothing now.
	fs.Duration("retention", 168*time.Hour, "serve's --retention (accepted; no warning depends on it)")
	pos, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return cli.Usagef("check takes one PROGRAM file, got %d", len(pos))
	}
	c, err := server.LoadConfig(pos[0], *manifestPath, *costLimit)
	if err != nil {
		return err
	}
	summary.Write(stdout, c, *history)
	return nil
}
