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
type runContext struct {
	// e is the run's /event: the entry's delivery, or the last one its
	// gathering holds; all is /events, every gathered delivery in order
	// (the entry alone when it gathered none).
	e     *touba.Delivery
	all   []*touba.Delivery
	doc   map[string]any // nil until a pointer needs it
	steps map[string]any
	// raw are step outputs not decoded yet: most are never referenced
	// (always the last step's). A $ref into steps decodes it.
	raw map[string]json.RawMessage
	// body is the body in canonical form once a $ref to it needed it; nil
	// before, or when Canonical refuses the body.
	body []byte
}

// newRunContext is the run context of entry e; a carrier's (e.Gathered
// set) sees the last gathered delivery as /event and all of them, e
// first, as /events (SPEC §2.1 "A gathered run").
func newRunContext(e *touba.Delivery) *runContext {
	rc := &runContext{e: e, all: []*touba.Delivery{e}, steps: map[string]any{}, raw: map[string]json.RawMessage{}}
	if len(e.Gathered) > 0 {
		rc.all = append(rc.all, e.Gathered...)
		rc.e = rc.all[len(rc.all)-1]
	}
	return rc
}

// document returns the run context as a tree, building it on first use.
func (rc *runContext) document() map[string]any {
	if rc.doc == nil {
		events := make([]any, len(rc.all))
		for i, d := range rc.all {
			events[i] = eventDoc(d)
		}
		rc.doc = map[string]any{"event": events[len(events)-1], "events": events, "steps": rc.steps}
	}
	return rc.doc
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
	out := make([]byte, 0, tpl.size+len(rc.e.Body))
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
		v, err := rc.value(p.ptr)
		if err != nil {
			return nil, err
		}
		out = append(out, v...)
	}
	return out, nil
}

// vars are the variables of a step expression: the run's event, body,
// headers, steps and events (SPEC §2.4).
func (rc *runContext) vars() (*expr.Vars, error) {
	if err := rc.materialize("/steps"); err != nil {
		return nil, touba.Errorf(touba.EExpressionFailed, "%v", err)
	}
	doc := rc.document()
	ev := doc["event"].(map[string]any)
	events, _ := doc["events"].([]any)
	return &expr.Vars{TriggerRef: rc.e.TriggerRef, EventID: rc.e.EventID, QueueID: rc.e.QueueID,
		ReceivedAt: touba.FormatTime(rc.e.ReceivedAt), Headers: rc.e.Headers, Body: ev["body"],
		Steps: rc.steps, Events: events, Event: ev}, nil
}

// eval is the canonical JSON of what x gives in the run context.
func (rc *runContext) eval(x *expr.Expr) ([]byte, error) {
	v, err := rc.vars()
	if err != nil {
		return nil, err
	}
	b, err := x.JSON(v)
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
	if err != nil {
		return false, touba.Errorf(touba.EExpressionFailed, "%v", err)
	}
	return ok, nil
}

// value is the canonical JSON of what ptr names in the run context.
func (rc *runContext) value(ptr string) ([]byte, error) {
	if ptr == bodyRef {
		if rc.body == nil {
			if c, err := handler.Canonical(rc.e.Body); err == nil {
				rc.body = c
			}
		}
		if rc.body != nil {
			return rc.body, nil
		}
	}
	if err := rc.materialize(ptr); err != nil {
		return nil, touba.Errorf(touba.EStepInputUnresolved, "$ref %q: %v", ptr, err)
	}
	got, err := jsonptr.Get(rc.document(), ptr)
	if err != nil {
		return nil, touba.Errorf(touba.EStepInputUnresolved, "$ref %q resolves to nothing", ptr)
	}
	b, err := canonical(got)
	if err != nil {
		return nil, touba.Errorf(touba.EStepInputUnresolved, "$ref %q: %v", ptr, err)
	}
	return b, nil
}
