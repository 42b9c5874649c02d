package trigger

import (
	"encoding/json"

	"github.com/touba/touba-trigger/expr"
	"strings"
	"time"

	"github.com/touba/touba-trigger/internal/jsonptr"
	"github.com/touba/touba-trigger/internal/strictjson"
)

// The step kinds of SPEC §2.3 (a tool call, a sleep, a wait for another
// trigger's event) and a trigger's cancel_on, loaded strictly. Which
// trigger a wait_for or a cancel_on names is checked once every trigger
// is known (index.go): a step may wait for a trigger written after it.

// maxWaitMS bounds sleep.ms and wait_for.timeout_ms: ten years, far past
// any business wait, short of overflowing a time.Duration.
const maxWaitMS = 10 * 365 * 24 * 3600 * 1000

var stepFields = []string{"id", "tool", "input", "sleep", "wait_for", "when"}

// step reads one step; earlier holds the ids of the steps before it.
func (w walker) step(p string, r *strictjson.Node, earlier map[string]bool, b expr.Bounds) (Step, error) {
	var s Step
	m, err := w.Object(p, r, stepFields, "id")
	if err != nil {
		return s, err
	}
	if s.ID, err = w.Str(p+".id", m["id"]); err != nil {
		return s, err
	}
	if !stepIDPattern.MatchString(s.ID) {
		return s, w.Fail(p+".id", "must match [A-Za-z0-9_-]{1,64}")
	}
	if earlier[s.ID] {
		return s, w.Fail(p+".id", "duplicate step id %q", s.ID)
	}
	kinds := 0
	for _, k := range []string{"tool", "sleep", "wait_for"} {
		if m[k] != nil {
			kinds++
		}
	}
	if kinds != 1 {
		return s, w.Fail(p, `must have exactly one of "tool", "sleep", "wait_for"`)
	}
	if v, ok := m["when"]; ok {
		if s.When, err = w.compile(p+".when", v, expr.Step, expr.Bool, b); err != nil {
			return s, err
		}
	}
	if in := m["input"]; in != nil && m["tool"] == nil {
		return s, w.Fail(p+".input", `only a "tool" step takes an input`)
	}
	switch {
	case m["sleep"] != nil:
		s.Sleep, err = w.sleep(p+".sleep", m["sleep"], earlier)
		return s, err
	case m["wait_for"] != nil:
		s.WaitFor, err = w.waitFor(p+".wait_for", m["wait_for"], earlier, b)
		return s, err
	}
	if s.Tool, err = w.Str(p+".tool", m["tool"]); err != nil {
		return s, err
	}
	if !toolPattern.MatchString(s.Tool) {
		return s, w.Fail(p+".tool", `must be "tool:" followed by [A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*`)
	}
	s.Input = json.RawMessage("{}")
	if in, ok := m["input"]; ok {
		cels := map[string]*expr.Expr{}
		if err := w.refs(p+".input", in, earlier, b, cels); err != nil {
			return s, err
		}
		s.Input = in.Raw
		if len(cels) > 0 {
			s.Inputs = cels
		}
	}
	return s, nil
}

const untilRule = `must be an RFC 3339 time such as "2026-12-24T09:00:00Z" or {"$ref": POINTER}`

func (w walker) sleep(p string, r *strictjson.Node, earlier map[string]bool) (*Sleep, error) {
	m, err := w.Object(p, r, []string{"ms", "until"})
	if err != nil {
		return nil, err
	}
	if len(m) != 1 {
		return nil, w.Fail(p, `must have exactly one of "ms", "until"`)
	}
	s := &Sleep{}
	if v, ok := m["ms"]; ok {
		s.MS, err = w.Integer(p+".ms", v, maxWaitMS)
		return s, err
	}
	u := m["until"]
	switch u.Kind {
	case strictjson.String:
		if _, err := time.Parse(time.RFC3339, u.Text); err != nil {
			return nil, w.Fail(p+".until", untilRule)
		}
	case strictjson.Object:
		if len(u.Keys) != 1 || u.Keys[0] != "$ref" {
			return nil, w.Fail(p+".until", untilRule)
		}
		if err := w.ref(strictjson.Child(p+".until", "$ref"), u.Vals[0], earlier); err != nil {
			return nil, err
		}
	case strictjson.Null:
		return nil, w.Fail(p+".until", "must not be null")
	default:
		return nil, w.Fail(p+".until", untilRule)
	}
	s.Until = u.Raw
	return s, nil
}

func (w walker) waitFor(p string, r *strictjson.Node, earlier map[string]bool, b expr.Bounds) (*WaitFor, error) {
	m, err := w.Object(p, r, []string{"trigger", "match", "on", "timeout_ms", "on_timeout"}, "trigger", "match", "on")
	if err != nil {
		return nil, err
	}
	wf := &WaitFor{OnTimeout: OnTimeoutFail}
	if wf.Trigger, err = w.triggerRef(p+".trigger", m["trigger"]); err != nil {
		return nil, err
	}
	match := m["match"]
	if match.Kind == strictjson.Null {
		// A null never matches (CanonicalValue): the wait could only time out.
		return nil, w.Fail(p+".match", "must not be null")
	}
	if isCEL(match, "cel") {
		if wf.MatchCEL, err = w.compile(strictjson.Child(p+".match", "cel"), match.Vals[0], expr.Intake, expr.Value, b); err != nil {
			return nil, err
		}
	} else if err := w.refs(p+".match", match, earlier, b, nil); err != nil {
		return nil, err
	}
	wf.Match = match.Raw
	if wf.On, _, err = w.onPointer(p+".on", m["on"]); err != nil {
		return nil, err
	}
	if v, ok := m["timeout_ms"]; ok {
		if wf.TimeoutMS, err = w.Integer(p+".timeout_ms", v, maxWaitMS); err != nil {
			return nil, err
		}
	}
	if v, ok := m["on_timeout"]; ok {
		if wf.OnTimeout, err = w.Str(p+".on_timeout", v); err != nil {
			return nil, err
		}
		if wf.OnTimeout != OnTimeoutFail && wf.OnTimeout != OnTimeoutContinue {
			return nil, w.Fail(p+".on_timeout", `must be "fail" or "continue"`)
		}
		if wf.TimeoutMS == 0 {
			return nil, w.Fail(p+".on_timeout", "takes effect only with timeout_ms: without it the wait never times out")
		}
	}
	return wf, nil
}

// triggerRef reads the ref of the trigger a wait_for or cancel_on names.
func (w walker) triggerRef(p string, n *strictjson.Node) (string, error) {
	ref, err := w.Str(p, n)
	if err != nil {
		return "", err
	}
	if !refPattern.MatchString(ref) {
		return "", w.Fail(p, `must be "trigger:" followed by [A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*`)
	}
	return ref, nil
}

// onPointer reads where a delivery of the named trigger holds the value:
// a pointer into {"headers": lower-case names, "body": parsed JSON}, as
// a filter's pointer.
func (w walker) onPointer(p string, n *strictjson.Node) (string, []string, error) {
	s, err := w.Str(p, n)
	if err != nil {
		return "", nil, err
	}
	toks, err := jsonptr.Parse(s)
	if err != nil || len(toks) == 0 || (toks[0] != "headers" && toks[0] != "body") {
		return "", nil, w.Fail(p, "must be a JSON pointer into /headers or /body of the named trigger's delivery")
	}
	if toks[0] == "headers" && len(toks) > 1 && toks[1] != strings.ToLower(toks[1]) {
		return "", nil, w.Fail(p, "header names are lower-case (as a filter's)")
	}
	return s, toks, nil
}

const cancelMatchRule = `must be {"cel": EXPR} or {"$ref": POINTER} into /event/body, /event/headers, /event/event_id, /event/trigger_ref or /event/received_at: it resolves when the entry is accepted`

// cancelOn reads a trigger's cancel_on list.
func (w walker) cancelOn(p string, r *strictjson.Node, b expr.Bounds) ([]CancelOn, error) {
	list, err := w.Array(p, r)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, w.Fail(p, "must hold at least one entry (omit the field when nothing cancels)")
	}
	out := make([]CancelOn, 0, len(list))
	for i, e := range list {
		at := strictjson.Index(p, i)
		m, err := w.Object(at, e, []string{"trigger", "match", "on"}, "trigger", "match", "on")
		if err != nil {
			return nil, err
		}
		var c CancelOn
		if c.Trigger, err = w.triggerRef(at+".trigger", m["trigger"]); err != nil {
			return nil, err
		}
		mt := m["match"]
		if isCEL(mt, "cel") {
			if c.MatchCEL, err = w.compile(strictjson.Child(at+".match", "cel"), mt.Vals[0], expr.Intake, expr.Value, b); err != nil {
				return nil, err
			}
			c.Match = mt.Raw
			if c.On, _, err = w.onPointer(at+".on", m["on"]); err != nil {
				return nil, err
			}
			out = append(out, c)
			continue
		}
		if mt.Kind != strictjson.Object || len(mt.Keys) != 1 || mt.Keys[0] != "$ref" {
			return nil, w.Fail(at+".match", cancelMatchRule)
		}
		ptr := strictjson.Child(at+".match", "$ref")
		s, err := w.Str(ptr, mt.Vals[0])
		if err != nil {
			return nil, err
		}
		toks, err := jsonptr.Parse(s)
		if err != nil || len(toks) < 2 || toks[0] != "event" || !eventFields[toks[1]] {
			return nil, w.Fail(ptr, cancelMatchRule)
		}
		if toks[1] == "headers" && len(toks) > 2 && toks[2] != strings.ToLower(toks[2]) {
			// An entry keeps its header names lower-case: X-Account would
			// never resolve, and the entry could never be cancelled.
			return nil, w.Fail(ptr, "header names are lower-case in /event/headers")
		}
		c.Match, c.match = mt.Raw, toks[1:]
		if c.On, _, err = w.onPointer(at+".on", m["on"]); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// eventFields are the members of /event known when an entry is accepted
// (its queue_id is not: the queue gives it, and it is unique anyway).
var eventFields = map[string]bool{"trigger_ref": true, "event_id": true, "received_at": true, "headers": true, "body": true}
