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
	return &runContext{doc: map[string]any{"event": event, "steps": steps}, steps: steps}
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

func (rc *runContext) setOutput(stepID string, out json.RawMessage) error {
	v, err := decode(out)
	if err != nil {
		return fmt.Errorf("output of step %s is not JSON: %w", stepID, err)
	}
	rc.steps[stepID] = map[string]any{"output": v}
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
