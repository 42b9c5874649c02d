package dispatcher

import (
	"bytes"
	"encoding/json"
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/expr"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/internal/jsonptr"
	"github.com/touba/touba-trigger/internal/jsonx"
)

// runContext is the document `$ref` pointers read (SPEC §2.1):
// {"event": {...}, "events": [{...}, ...], "steps": {"<id>": {"output":
// ...}}}. It is built on first use: most inputs read only the whole
// body, which is taken in canonical form without decoding (value), and
// decoding it into the tree cost more than the SQL of its effect.
//
// A carrier's gathering is read as its steps name it (issue 43; events.go):
// /event reads the last delivery, /events every one, once, into the
// input being written; a run whose steps name neither reads no merged
// body.
type runContext struct {
	// e is the run's entry; last is /event once read: e itself when e
	// gathered nothing, else the last delivery its gathering holds.
	e    *touba.Delivery
	last *touba.Delivery
	// g reads e's gathering from the store; nil when e gathered nothing,
	// or its merged entries were read already into e.Gathered (admin's
	// rebuild of an input).
	g     *gathering
	doc   map[string]any // /event and /steps, nil until a pointer needs it
	steps map[string]any
	// raw are step outputs not decoded yet: most are never referenced
	// (always the last step's). A $ref into steps decodes it.
	raw map[string]json.RawMessage
	// body is /event's body in canonical form once a $ref to it needed
	// it; nil before, or when Canonical refuses the body.
	body []byte
}

// newRunContext is the run context of entry e; a carrier's (e.Gathered
// set, or g) sees the last gathered delivery as /event and all of them, e
// first, as /events (SPEC §2.1 "A gathered run").
func newRunContext(e *touba.Delivery, g *gathering) *runContext {
	return &runContext{e: e, g: g, steps: map[string]any{}, raw: map[string]json.RawMessage{}}
}

// document returns /event and /steps as a tree, building it on first use
// (/events is never in it: events.go writes it).
func (rc *runContext) document() (map[string]any, error) {
	if rc.doc == nil {
		last, err := rc.event()
		if err != nil {
			return nil, err
		}
		rc.doc = map[string]any{"event": eventDoc(last), "steps": rc.steps}
	}
	return rc.doc, nil
}

// eventDoc is one delivery as /event shows it.
func eventDoc(d *touba.Delivery) map[string]any {
	headers := make(map[string]any, len(d.Headers))
	for k, v := range d.Headers {
		headers[k] = v
	}
	return map[string]any{
		"trigger_ref": d.TriggerRef,
		"event_id":    d.EventID,
		"queue_id":    d.QueueID,
		"received_at": touba.FormatTime(d.ReceivedAt),
		"headers":     headers,
		"body":        parseBody(d.Body),
	}
}

// parseBody is the parsed JSON body, numbers kept as written, or the raw
// body as a string when it is not JSON.
func parseBody(b []byte) any {
	v, err := decode(b)
	if err != nil {
		return string(b)
	}
	return v
}

func decode(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data")
	}
	return v, nil
}

// setOutput records a step's output, checked to be one JSON value now and
// decoded when a $ref first reads it (materialize).
func (rc *runContext) setOutput(stepID string, out json.RawMessage) error {
	if err := checkJSON(out); err != nil {
		return fmt.Errorf("output of step %s is not JSON: %w", stepID, err)
	}
	delete(rc.steps, stepID)
	rc.raw[stepID] = out
	return nil
}

// checkJSON accepts what decode accepts: one JSON value, with white space
// around it.
func checkJSON(b []byte) error {
	if !jsonx.Valid(b) {
		_, err := decode(b) // for its message
		if err == nil {
			err = fmt.Errorf("invalid JSON")
		}
		return err
	}
	return nil
}

// materialize decodes the step outputs ptr may read: the one it names
// under /steps, or all of them for a pointer to /steps or the whole
// document.
func (rc *runContext) materialize(ptr string) error {
	if len(rc.raw) == 0 {
		return nil
	}
	toks, err := jsonptr.Parse(ptr)
	if err != nil || (len(toks) > 0 && toks[0] != "steps") {
		return nil // jsonptr.Get says what is wrong, or the pointer is not into steps
	}
	ids := make([]string, 0, len(rc.raw))
	if len(toks) >= 2 {
		if _, ok := rc.raw[toks[1]]; ok {
			ids = append(ids, toks[1])
		}
	} else {
		for id := range rc.raw {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		v, err := decode(rc.raw[id])
		if err != nil {
			return fmt.Errorf("output of step %s is not JSON: %w", id, err)
		}
		rc.steps[id] = map[string]any{"output": v}
		delete(rc.raw, id)
	}
	return nil
}

// bodyRef is the pointer to the whole event body: its value is the body
// as sent when that is JSON.
const bodyRef = "/event/body"

// resolve replaces every {"$ref": pointer} object of the step's input by
// the value the pointer names in the run context; everything else is
// literal. The input comes out in canonical form (handler.Canonical), what
// its fingerprint is computed over: the template's literal text is
// canonical already (template.go), and each value is written canonical.
//
// The whole body, the common $ref, is not decoded: its canonical form is
// what decoding and encoding it would give, whenever Canonical accepts it.
// A body it refuses (not JSON, or JSON whose meaning decoding has to
// choose: duplicate keys, invalid UTF-8, lone surrogates) is decoded, as
// for every $ref into the body.
//
// A {"$cel": EXPR} value is the expression's value in canonical form; an
// expression that fails is ExpressionFailed (not retried). The input,
// with it, is what the fingerprint covers: an expression reads the event
// and the steps only (no clock), so a retry, a restart or a replay
// computes the same input.
func (rc *runContext) resolve(cfg *Config, input json.RawMessage, cels map[string]*expr.Expr) (json.RawMessage, error) {
	tpl, err := cfg.template(input, cels)
	if err != nil {
		return nil, touba.Errorf(touba.EStepInputUnresolved, "input is not JSON: %v", err)
	}
	n := tpl.size + len(rc.e.Body)
	if tpl.events {
		n += rc.eventsSize()
	}
	out := make([]byte, 0, n)
	for _, p := range tpl.parts {
		if p.cel != nil {
			v, err := rc.eval(p.cel)
			if err != nil {
				return nil, err
			}
			out = append(out, v...)
			continue
		}
		if !p.ref {
			out = append(out, p.text...)
			continue
		}
		if out, err = rc.appendValue(out, p.ptr); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// vars are the variables of a step expression: the run's event, body,
// headers, steps and events (SPEC §2.4). events is built only when the
// expression reads it (Vars.LoadEvents): a gathering's bodies are decoded
// for a step that names them, never for one that does not (issue 43).
func (rc *runContext) vars() (*expr.Vars, error) {
	if err := rc.materialize("/steps"); err != nil {
		return nil, touba.Errorf(touba.EExpressionFailed, "%v", err)
	}
	doc, err := rc.document()
	if err != nil {
		return nil, err
	}
	ev := doc["event"].(map[string]any)
	v := &expr.Vars{TriggerRef: rc.e.TriggerRef, EventID: rc.e.EventID, QueueID: rc.e.QueueID,
		ReceivedAt: touba.FormatTime(rc.e.ReceivedAt), Headers: rc.e.Headers, Body: ev["body"],
		Steps: rc.steps, Event: ev}
	v.LoadEvents = func() ([]any, error) {
		var events []any
		err := rc.each(func(d *touba.Delivery) error {
			events = append(events, eventDoc(d))
			return nil
		})
		return events, err
	}
	return v, nil
}

// eval is the canonical JSON of what x gives in the run context.
func (rc *runContext) eval(x *expr.Expr) ([]byte, error) {
	v, err := rc.vars()
	if err != nil {
		return nil, err
	}
	b, err := x.JSON(v)
	if v.EventsErr != nil {
		return nil, v.EventsErr // the gathering could not be read: not the expression's failure
	}
	if err != nil {
		return nil, touba.Errorf(touba.EExpressionFailed, "%v", err)
	}
	c, err := handler.Canonical(b)
	if err != nil {
		return nil, touba.Errorf(touba.EExpressionFailed, "%s: %v", x.Source, err)
	}
	return c, nil
}

// when evaluates a step's condition in the run context.
func (rc *runContext) when(x *expr.Expr) (bool, error) {
	v, err := rc.vars()
	if err != nil {
		return false, err
	}
	ok, err := x.Bool(v)
	if v.EventsErr != nil {
		return false, v.EventsErr
	}
	if err != nil {
		return false, touba.Errorf(touba.EExpressionFailed, "%v", err)
	}
	return ok, nil
}

// appendValue appends the canonical JSON of what ptr names in the run
// context to out. /events and the whole document are written into out
// delivery by delivery (events.go), never decoded into the tree.
func (rc *runContext) appendValue(out []byte, ptr string) ([]byte, error) {
	if ptr == bodyRef {
		if rc.body == nil {
			last, err := rc.event()
			if err != nil {
				return nil, err
			}
			if c, err := handler.Canonical(last.Body); err == nil {
				rc.body = c
			}
		}
		if rc.body != nil {
			return append(out, rc.body...), nil
		}
	}
	if toks, err := jsonptr.Parse(ptr); err == nil {
		switch {
		case len(toks) == 0:
			return rc.appendDocument(out)
		case toks[0] == "events":
			return rc.appendEvents(out, ptr, toks)
		}
	}
	if err := rc.materialize(ptr); err != nil {
		return nil, touba.Errorf(touba.EStepInputUnresolved, "$ref %q: %v", ptr, err)
	}
	doc, err := rc.document()
	if err != nil {
		return nil, err
	}
	got, err := jsonptr.Get(doc, ptr)
	if err != nil {
		return nil, touba.Errorf(touba.EStepInputUnresolved, "$ref %q resolves to nothing", ptr)
	}
	b, err := canonical(got)
	if err != nil {
		return nil, touba.Errorf(touba.EStepInputUnresolved, "$ref %q: %v", ptr, err)
	}
	return append(out, b...), nil
}
