package dispatcher

import (
	"bytes"
	"encoding/json"
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/jsonptr"
)

// runContext is the document `$ref` pointers read (SPEC §2.1):
// {"event": {...}, "steps": {"<id>": {"output": ...}}}.
type runContext struct {
	doc   map[string]any
	steps map[string]any
	// raw are step outputs not decoded yet: most are never referenced
	// (always the last step's), and decoding one into the tree cost as much
	// as the journal's SQL of its effect. A $ref into steps decodes it.
	raw map[string]json.RawMessage
}

func newRunContext(e *touba.Delivery) *runContext {
	headers := map[string]any{}
	for k, v := range e.Headers {
		headers[k] = v
	}
	event := map[string]any{
		"trigger_ref": e.TriggerRef,
		"event_id":    e.EventID,
		"queue_id":    e.QueueID,
		"received_at": touba.FormatTime(e.ReceivedAt),
		"headers":     headers,
		"body":        parseBody(e.Body),
	}
	steps := map[string]any{}
	return &runContext{doc: map[string]any{"event": event, "steps": steps}, steps: steps, raw: map[string]json.RawMessage{}}
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
	if !json.Valid(b) {
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

// resolve replaces every {"$ref": pointer} object of input by the value the
// pointer names in the run context; everything else is literal.
func (rc *runContext) resolve(input json.RawMessage) (json.RawMessage, error) {
	v, err := decode(input)
	if err != nil {
		return nil, touba.Errorf(touba.EStepInputUnresolved, "input is not JSON: %v", err)
	}
	out, err := rc.walk(v)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, touba.Errorf(touba.EStepInputUnresolved, "input: %v", err)
	}
	return b, nil
}

func (rc *runContext) walk(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := x["$ref"]; ok && len(x) == 1 {
			ptr, _ := ref.(string)
			if err := rc.materialize(ptr); err != nil {
				return nil, touba.Errorf(touba.EStepInputUnresolved, "$ref %q: %v", ptr, err)
			}
			got, err := jsonptr.Get(rc.doc, ptr)
			if err != nil {
				return nil, touba.Errorf(touba.EStepInputUnresolved, "$ref %q resolves to nothing", ptr)
			}
			return got, nil
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			r, err := rc.walk(e)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := rc.walk(e)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	}
	return v, nil
}
