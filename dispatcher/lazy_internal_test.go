package dispatcher

import (
	"encoding/json"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// Step outputs are decoded when a $ref reads them: a pointer into one
// step, to all steps, or to the whole document sees them as if decoded at
// once, and an output that is not one JSON value is refused when set.
func TestLazyStepOutputs(t *testing.T) {
	rc := newRunContext(&touba.Delivery{TriggerRef: "trigger:t/x", EventID: "e", QueueID: "q", Body: []byte(`{"n":1}`)}, nil)
	if err := rc.setOutput("a", json.RawMessage(`{"x": 12345678901234567890, "y": [1, 2]}`)); err != nil {
		t.Fatal(err)
	}
	if err := rc.setOutput("b", json.RawMessage(`"bee"`)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ in, want string }{
		{`{"v": {"$ref": "/steps/a/output/x"}}`, `{"v":12345678901234567890}`},
		{`{"v": {"$ref": "/steps/b/output"}}`, `{"v":"bee"}`},
		{`{"v": {"$ref": "/steps"}}`, `{"v":{"a":{"output":{"x":12345678901234567890,"y":[1,2]}},"b":{"output":"bee"}}}`},
		{`{"v": {"$ref": "/event/body/n"}}`, `{"v":1}`},
	} {
		got, err := rc.resolve(&Config{}, json.RawMessage(c.in), nil)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if string(got) != c.want {
			t.Errorf("%s: got %s, want %s", c.in, got, c.want)
		}
	}
	if _, err := rc.resolve(&Config{}, json.RawMessage(`{"$ref": "/steps/c/output"}`), nil); touba.ErrorCode(err) != touba.EStepInputUnresolved {
		t.Errorf("ref to a step without output: %v, want StepInputUnresolved", err)
	}
	for _, bad := range []string{``, `{"a":1} {"b":2}`, `{"a":`, `nope`} {
		if err := rc.setOutput("c", json.RawMessage(bad)); err == nil {
			t.Errorf("output %q accepted", bad)
		}
	}
	// The whole document, once every output is decoded.
	got, err := rc.resolve(&Config{}, json.RawMessage(`{"$ref": ""}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(got, &doc); err != nil || doc["steps"] == nil {
		t.Fatalf("whole document %s: %v", got, err)
	}
}
