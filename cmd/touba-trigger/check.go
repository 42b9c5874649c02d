package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/server"
)

// runCheck validates a program and its manifest and prints a summary.
func runCheck(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("check", stderr)
	manifestPath := fs.String("manifest", "", "the touba-manifest-v1 file")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{err: fmt.Errorf("check takes one PROGRAM file, got %d", len(pos))}
	}
	c, err := server.LoadConfig(pos[0], *manifestPath)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "program %s: %d trigger(s)\n", c.Program.Path, len(c.Program.Triggers))
	for _, t := range c.Program.Triggers {
		scheme := "none"
		if t.Source.Verify != nil {
			scheme = t.Source.Verify.Scheme
		}
		id := "header " + t.Source.EventID.Header
		if t.Source.EventID.JSONPointer != "" {
			id = "body " + t.Source.EventID.JSONPointer
		}
		fmt.Fprintf(stdout, "  %s  POST /triggers/%s  verify=%s  event_id=%s  steps=%d\n",
			t.Ref, t.Name, scheme, id, len(t.Steps))
		for _, line := range flowSummary(t) {
			fmt.Fprintf(stdout, "    %s\n", line)
		}
	}
	for _, t := range c.Program.Triggers {
		if why := t.UnsignedEventID(); why != "" {
			fmt.Fprintf(stdout, "warning: %s: %s\n", t.Ref, why)
		}
	}
	refs := slices.Sorted(maps.Keys(c.Manifest.Bindings))
	fmt.Fprintf(stdout, "manifest %s: %d binding(s)\n", c.Manifest.Path, len(refs))
	for _, ref := range refs {
		b := c.Manifest.Bindings[ref]
		mode := b.EffectContract.Kind
		if b.EffectContract.RetryMode != "" {
			mode += "/" + b.EffectContract.RetryMode
		}
		limit := ""
		if b.MaxConcurrency > 0 {
			limit = fmt.Sprintf("  max_concurrency=%d", b.MaxConcurrency)
		}
		fmt.Fprintf(stdout, "  %s  %s  effect=%s%s\n", ref, b.Handler.Kind, mode, limit)
	}
	printIsolation(stdout, c.Manifest.NeedNetworkIsolation())
	fmt.Fprintln(stdout, "ok")
	return nil
}

// printIsolation says whether this host, for this user, can run the
// process bindings without the network grant (refs) without network, as
// serve will (SPEC §2.2); where it cannot, a warning names them, since
// serve would refuse them (NetworkIsolationUnavailable). The answer is for
// the user check runs as: run it as the daemon's user.
func printIsolation(w io.Writer, refs []string) {
	method, err := handler.IsolationMethod()
	avail := "available: " + method
	if err != nil {
		avail = fmt.Sprintf("unavailable for uid %d on this host: %v", os.Geteuid(), err)
	}
	need := "none"
	if len(refs) > 0 {
		need = strings.Join(refs, ", ")
	}
	fmt.Fprintf(w, "network isolation %s; bindings without the network grant: %s\n", avail, need)
	if err != nil && len(refs) > 0 {
		fmt.Fprintf(w, "warning: serve refuses to start (%s) with binding %s unless --allow-unisolated-handlers runs it with the host's network\n",
			touba.ENetworkIsolationUnavailable, need)
	}
}
