// Package summary is what `touba-trigger check` prints of a program and
// its manifest once both load: each trigger's route, signature scheme,
// identity, flow control and durable steps, the digests of new entries,
// the warnings (an unsigned event id, a --history shorter than a wait, a
// trigger that does nothing), each binding and whether this host can
// isolate the handlers that need it. It lives apart from cmd/touba-trigger,
// which keeps check's flags and loading.
package summary

import (
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

// Write prints the summary of c, warning where serve's --history
// (history) is shorter than a wait or twice a schedule's period, and ends
// with "ok".
func Write(w io.Writer, c *server.Loaded, history time.Duration) {
	fmt.Fprintf(w, "program %s: %d trigger(s)\n", c.Program.Path, len(c.Program.Triggers))
	for _, t := range c.Program.Triggers {
		if sc := t.Source.Schedule; sc != nil {
			printSchedule(w, t, sc, time.Now())
			printLines(w, routesSummary(t))
			printLines(w, durableSummary(c.Program, t))
			continue
		}
		if t.IsRoute() {
			printRoute(w, t)
			printLines(w, durableSummary(c.Program, t))
			continue
		}
		scheme := verifyText(t.Source.Verify)
		fmt.Fprintf(w, "  %s  POST /triggers/%s  verify=%s  steps=%d  weight=%d\n", t.Ref, t.Name, scheme, len(t.Steps), t.Weight)
		// Where the identity comes from, whether a delivery without it is
		// refused, and what a redelivery of a consumed entry is answered.
		fmt.Fprintf(w, "    event_id: %s  redelivery=%s\n", t.Source.EventID.Describe(), t.Source.Redelivery)
		printLines(w, flowSummary(t))
		printLines(w, routesSummary(t))
		printLines(w, durableSummary(c.Program, t))
	}
	printDigests(w, c.Program)
	printExpressions(w, c.Program)
	for _, t := range c.Program.Triggers {
		if why := t.UnsignedEventID(); why != "" {
			fmt.Fprintf(w, "warning: %s: %s\n", t.Ref, why)
		}
	}
	for _, warning := range server.HistoryWarnings(c.Program, history) {
		fmt.Fprintf(w, "warning: %s\n", warning)
	}
	for _, ref := range idleTriggers(c.Program) {
		fmt.Fprintf(w, "warning: %s: no steps, and no wait_for or cancel_on names it: its entries do nothing\n", ref)
	}
	refs := slices.Sorted(maps.Keys(c.Manifest.Bindings))
	fmt.Fprintf(w, "manifest %s: %d binding(s)\n", c.Manifest.Path, len(refs))
	for _, ref := range refs {
		b := c.Manifest.Bindings[ref]
		mode := b.EffectContract.Kind
		if b.EffectContract.RetryMode != "" {
			mode += "/" + b.EffectContract.RetryMode
		}
		fmt.Fprintf(w, "  %s  %s  effect=%s%s\n", ref, b.Handler.Kind, mode, limitText(b))
		printLines(w, circuitSummary(b))
		printLines(w, httpSummary(b))
		printLines(w, brokerSummary(b, c.Resolved))
	}
	printIsolation(w, c.Manifest.NeedNetworkIsolation())
	fmt.Fprintln(w, "ok")
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
