package summary

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/trigger"
)

// durableSummary is what `check` prints of a trigger's durable steps
// (SPEC §2.3): for a trigger with a sleep, a wait_for or a cancel_on, each
// step in order (a tool step too, so the flow reads whole) and each
// cancel_on; for any trigger, the waits and cancels that name it. A
// trigger with tool steps only, named by nothing, prints nothing here, as
// before durable steps.
func durableSummary(p *trigger.Program, t *trigger.Trigger) []string {
	var out []string
	if hasDurableSteps(t) {
		for _, s := range t.Steps {
			out = append(out, "step "+s.ID+": "+stepText(s))
		}
	}
	for i, c := range t.CancelOn {
		out = append(out, fmt.Sprintf("cancel_on[%d]: by %s when on %s equals match %s", i, c.Trigger, c.On, compactJSON(c.Match)))
	}
	l := p.Listeners(t.Ref)
	for _, w := range l.Waits {
		name := w.Key
		if k, ok := touba.ParseKey(w.Key); ok {
			name = k.Awaiting + "#" + k.StepID
		}
		out = append(out, fmt.Sprintf("awaited by %s (offers the value at %s)", name, w.On))
	}
	for _, c := range l.Cancels {
		out = append(out, fmt.Sprintf("cancels entries of %s (the value at %s)", c.Trigger, c.On))
	}
	return out
}

func hasDurableSteps(t *trigger.Trigger) bool {
	if len(t.CancelOn) > 0 {
		return true
	}
	for _, s := range t.Steps {
		if s.Tool == "" {
			return true
		}
	}
	return false
}

// stepText is one step as check prints it.
func stepText(s trigger.Step) string {
	switch {
	case s.Sleep != nil && s.Sleep.MS > 0:
		return "sleep " + msText(s.Sleep.MS)
	case s.Sleep != nil:
		return "sleep until " + compactJSON(s.Sleep.Until)
	case s.WaitFor != nil:
		w := s.WaitFor
		timeout := "timeout=none"
		if w.TimeoutMS > 0 {
			timeout = "timeout=" + msText(w.TimeoutMS) + " on_timeout=" + w.OnTimeout
		}
		return fmt.Sprintf("wait_for %s on=%s match=%s %s", w.Trigger, w.On, compactJSON(w.Match), timeout)
	}
	return s.Tool
}

// msText renders a duration in milliseconds as Go does (72h0m0s), with
// whole days spelled out when there are some: "3d (72h0m0s)".
func msText(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd (%s)", d/(24*time.Hour), d)
	}
	return d.String()
}

// printDigests lists each trigger's digest (its first 12 hex characters),
// the program_digest its new entries carry: after a reload, an entry
// whose digest is not its trigger's runs under version pinning.
func printDigests(w io.Writer, p *trigger.Program) {
	fmt.Fprintln(w, "digests (the program_digest of new entries):")
	for _, t := range p.Triggers {
		fmt.Fprintf(w, "  %s  %s\n", t.Ref, trigger.DigestPrefix(t.Digest))
	}
}

// compactJSON is a program's JSON value without the spaces it was
// written with.
func compactJSON(raw []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// idleTriggers are the triggers with no steps that nothing awaits, that
// cancel nothing and feed no route: their entries end done at once and
// mean nothing.
func idleTriggers(p *trigger.Program) []string {
	var out []string
	for _, t := range p.Triggers {
		if len(t.Steps) == 0 && !t.Durable() && len(t.Routes) == 0 {
			out = append(out, t.Ref)
		}
	}
	return out
}
