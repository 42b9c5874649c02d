package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/server"
	"github.com/touba/touba-trigger/trigger"
	"github.com/touba/touba-trigger/verify"
)

// runCheck validates a program and its manifest and prints a summary.
func runCheck(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("check", stderr)
	manifestPath := fs.String("manifest", "", "the touba-manifest-v1 file")
	history := fs.Duration("history", touba.DefaultHistory, "serve's --history, to warn where it is shorter than a wait_for timeout or a schedule's catch-up")
	retention := fs.Duration("retention", 168*time.Hour, "serve's --retention (how far a schedule's catch-up looks back)")
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
		if sc := t.Source.Schedule; sc != nil {
			printSchedule(stdout, t, sc, time.Now())
			printLines(stdout, durableSummary(c.Program, t))
			continue
		}
		scheme := verifyText(t.Source.Verify)
		fmt.Fprintf(stdout, "  %s  POST /triggers/%s  verify=%s  steps=%d  weight=%d\n", t.Ref, t.Name, scheme, len(t.Steps), t.Weight)
		// Where the identity comes from, whether a delivery without it is
		// refused, and what a redelivery of a consumed entry is answered.
		fmt.Fprintf(stdout, "    event_id: %s  redelivery=%s\n", t.Source.EventID.Describe(), t.Source.Redelivery)
		printLines(stdout, flowSummary(t))
		printLines(stdout, durableSummary(c.Program, t))
	}
	printDigests(stdout, c.Program)
	for _, t := range c.Program.Triggers {
		if why := t.UnsignedEventID(); why != "" {
			fmt.Fprintf(stdout, "warning: %s: %s\n", t.Ref, why)
		}
	}
	for _, w := range server.HistoryWarnings(c.Program, *history, *retention) {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	for _, ref := range idleTriggers(c.Program) {
		fmt.Fprintf(stdout, "warning: %s: no steps, and no wait_for or cancel_on names it: its entries do nothing\n", ref)
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
		printLines(stdout, httpSummary(b))
	}
	printIsolation(stdout, c.Manifest.NeedNetworkIsolation())
	fmt.Fprintln(stdout, "ok")
	return nil
}

// verifyText is the scheme as check prints it; hmac-sha256 with the
// header, encoding and prefix in effect, since its defaults are not
// visible in the program.
func verifyText(v *trigger.Verify) string {
	switch {
	case v == nil:
		return "none"
	case v.Scheme != verify.SchemeHMACSHA256:
		return v.Scheme
	}
	header, encoding, prefix := verify.OutboundHeader, verify.EncodingHex, verify.DefaultPrefix
	if v.Header != "" {
		header = http.CanonicalHeaderKey(v.Header)
	}
	if v.Encoding != "" {
		encoding = v.Encoding
	}
	if v.Prefix != nil {
		prefix = *v.Prefix
	}
	return fmt.Sprintf("%s(header=%s,encoding=%s,prefix=%q)", v.Scheme, header, encoding, prefix)
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
