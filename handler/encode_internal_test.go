package handler

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// encodeRequest writes what a json.Encoder without HTML escaping wrote
// before it spliced the input in (issue 43): the same bytes for every
// input, and the Encoder's refusal of an input that is not JSON.
func TestEncodeRequestAsTheEncoder(t *testing.T) {
	encoder := func(req *Request, deadline time.Time) ([]byte, error) {
		r := *req
		if len(r.Input) == 0 {
			r.Input = json.RawMessage("null")
		}
		if r.Context.Grants == nil {
			r.Context.Grants = []string{}
		}
		if r.Context.DeadlineUnixMS == 0 && !deadline.IsZero() {
			r.Context.DeadlineUnixMS = deadline.UnixMilli()
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		err := enc.Encode(&r)
		return buf.Bytes(), err
	}
	at := time.UnixMilli(1767225600123)
	for _, in := range []string{``, `null`, `{"a": 1, "b": [1, 2 ,3]}`, ` "<&>\u2028" `, `{"events":[` + strings.Repeat(`{"x":"y"},`, 100) + `1]}`,
		`{"a":`, `{} {}`, "\"\xff\""} {
		req := &Request{Protocol: "touba-tool-handler-v1", Operation: "invoke", ToolRef: "tool:a/<B>", Input: json.RawMessage(in),
			Context: Context{TriggerRef: "trigger:t&x", EventID: "e", QueueID: "q", RunID: "r", CallID: "c", Attempt: 2}}
		want, werr := encoder(req, at)
		got, gerr := encodeRequest(req, at)
		if (werr == nil) != (gerr == nil) || (werr == nil && !bytes.Equal(got, want)) {
			t.Fatalf("input %q:\n got %s (%v)\nwant %s (%v)", in, got, gerr, want, werr)
		}
	}
	// A compact input is sent as it is, not copied into the request.
	in := json.RawMessage(`{"events":[{"body":"x"}]}`)
	b, err := encodeRequestBody(&Request{ToolRef: "tool:a/B", Input: in}, time.Time{})
	if err != nil || len(b) != 3 || &b[1][0] != &in[0] {
		t.Fatalf("encodeRequestBody of a compact input: %d pieces, %v; want the input itself as the middle one", len(b), err)
	}
	var w bytes.Buffer
	if n, err := b.WriteTo(&w); err != nil || int(n) != b.Len() || !bytes.Equal(w.Bytes(), b.Bytes()) {
		t.Fatalf("WriteTo: %d, %v", n, err)
	}
}
