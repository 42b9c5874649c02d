package dispatcher

import (
	"encoding/json"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/internal/jsonptr"
)

// referenceResolve is what a step's input means (SPEC §2.1), written the
// plain way: the whole run context decoded, the template decoded and
// walked, the result encoded. resolve must send the handler an input with
// the same fingerprint, or fail where this fails: an effect journaled
// before resolve spliced bodies in must match its input on a replay.
func referenceResolve(e *touba.Delivery, input json.RawMessage) (json.RawMessage, error) {
	// The document as the decoding dispatcher built it, /events included.
	all := append([]*touba.Delivery{e}, e.Gathered...)
	events := make([]any, len(all))
	for i, d := range all {
		events[i] = eventDoc(d)
	}
	doc := map[string]any{"event": events[len(events)-1], "events": events, "steps": map[string]any{}}
	v, err := decode(input)
	if err != nil {
		return nil, err
	}
	var walk func(v any) (any, error)
	walk = func(v any) (any, error) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"]; ok && len(x) == 1 {
				ptr, _ := ref.(string)
				return jsonptr.Get(doc, ptr)
			}
			out := map[string]any{}
			for k, e := range x {
				r, err := walk(e)
				if err != nil {
					return nil, err
				}
				out[k] = r
			}
			return out, nil
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				r, err := walk(e)
				if err != nil {
					return nil, err
				}
				out[i] = r
			}
			return out, nil
		}
		return v, nil
	}
	out, err := walk(v)
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

var resolveInputs = []string{
	`{"body": {"$ref": "/event/body"}}`,
	`{"$ref": "/event/body"}`,
	`[{"$ref": "/event/body"}, {"$ref": "/event/body"}, {"$ref": "/event/queue_id"}, "x"]`,
	`{"whole": {"$ref": "/event/body"}, "n": {"$ref": "/event/body/n"}}`,
	`{"é": 1, "<": "&\u2028", "z": {"$ref": "/event/body"}, "a": [1.0, -0, 1e3], "h": {"$ref": "/event/headers"}}`,
	// /events (issue 43: written delivery by delivery, never decoded).
	`{"all": {"$ref": "/events"}, "last": {"$ref": "/event"}}`,
	`{"first": {"$ref": "/events/0"}, "n": {"$ref": "/events/0/body/n"}, "h": {"$ref": "/events/0/headers"}}`,
	`{"$ref": ""}`,
	`{"$ref": "/events/1"}`,
	`{"$ref": "/events/01"}`,
	`{"$ref": "/events/-"}`,
}

func checkResolve(t *testing.T, body []byte, gathered []*touba.Delivery) {
	t.Helper()
	e := &touba.Delivery{TriggerRef: "trigger:t/x", EventID: "e", QueueID: "q", Body: body,
		Headers: map[string]string{"content-type": "application/json"}, Gathered: gathered}
	for _, in := range resolveInputs {
		want, werr := referenceResolve(e, json.RawMessage(in))
		var wantFP string
		if werr == nil {
			wantFP, werr = handler.Fingerprint("tool:a/B", touba.OperationInvoke, want)
		}
		got, gerr := newRunContext(e, nil).resolve(&Config{}, json.RawMessage(in), nil)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("body %q, input %s: reference error %v, resolve error %v", body, in, werr, gerr)
		}
		if werr != nil {
			continue
		}
		if c, err := handler.Canonical(got); err != nil || string(c) != string(got) {
			t.Fatalf("body %q, input %s: resolved %s is not canonical (%v)", body, in, got, err)
		}
		if fp, _ := handler.FingerprintCanonical("tool:a/B", touba.OperationInvoke, got); fp != wantFP {
			t.Fatalf("body %q, input %s: resolved %s (fingerprint %s), reference %s (fingerprint %s)", body, in, got, fp, want, wantFP)
		}
	}
}

var resolveBodies = []string{
	`{"n": 1, "b": [true, false, null], "a": {"z": 1.50, "y": -0, "x": 12345678901234567890123}}`,
	` {"n" : 2 } `,
	`{"html": "<a href=\"x\">&amp;</a>", "ls": "\u2028", "e": "\u00e9t\u00e9", "raw": "été", "ctl": "\u0000\t\n"}`,
	`{"n": 1, "n": 2}`,      // duplicate keys: decoding keeps the last
	"{\"n\": \"\xff\"}",     // invalid UTF-8: decoding replaces it
	`{"n": "\ud800"}`,       // a lone surrogate: decoding replaces it
	`{"n": "\ud83d\ude00"}`, // a pair
	`"just a string"`, `42`, `[]`, `null`,
	`a=1&b=<2>`, ``, `{"n": 1} {"m": 2}`, `{"n":`, // not JSON: the body as a string
	`"`, // a fragment: spliced twice into one input it read as one string (found by the fuzzer)
}

// TestResolveMatchesTheReference: for bodies of every kind, the spliced
// resolution has the reference's fingerprint (and so an effect journaled
// by the decoding dispatcher is recognised).
func TestResolveMatchesTheReference(t *testing.T) {
	for _, b := range resolveBodies {
		checkResolve(t, []byte(b), nil)
	}
	// A carrier: /event is the last of its gathering, /events all three.
	for _, b := range resolveBodies {
		checkResolve(t, []byte(b), []*touba.Delivery{
			{TriggerRef: "trigger:t/x", EventID: "e2", QueueID: "q2", Body: []byte(`{"n": 2}`)},
			{TriggerRef: "trigger:t/x", EventID: "e3", QueueID: "q3", Body: []byte(b), Headers: map[string]string{"x": "3"}}})
	}
}

func FuzzResolveMatchesTheReference(f *testing.F) {
	for _, b := range resolveBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkResolve(t, body, nil) })
}
