package handler

import (
	"bytes"
	"encoding/json"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/jsonptr"
)

// OutputHeaders are the answer headers an http call's output keeps (lower
// case): what a later step may need, and nothing that sets or carries
// credentials (Set-Cookie is left out).
var OutputHeaders = []string{"content-type", "content-location", "location", "etag", "last-modified",
	"idempotent-replayed", "request-id", "x-request-id"}

// request builds the call's request from its input: the URL's placeholders
// filled, the body, the headers. An input the URL or the body cannot be
// read from refuses the call unsent (StepInputUnresolved).
func (w *httpWire) request(req *Request, _ time.Time, _ bool) (*outRequest, *touba.Error) {
	input := req.Input
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, touba.Errorf(touba.EStepInputUnresolved, "input of %s is not JSON: %v", req.ToolRef, err)
	}
	u, err := w.tpl.Expand(doc)
	if err != nil {
		return nil, touba.Errorf(touba.EStepInputUnresolved, "url of %s: %v", req.ToolRef, err)
	}
	out := &outRequest{method: w.method, url: u, header: w.header.Clone(), label: "http " + w.method, masked: w.masked}
	out.header.Set("User-Agent", "touba-trigger")
	switch {
	case w.noBody:
	case w.bodyRef == "":
		out.body = input
	default:
		v, err := jsonptr.Get(doc, w.bodyRef)
		if err != nil {
			return nil, touba.Errorf(touba.EStepInputUnresolved, "body of %s: $ref %q resolves to nothing", req.ToolRef, w.bodyRef)
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return nil, touba.Errorf(touba.EStepInputUnresolved, "body of %s: %v", req.ToolRef, err)
		}
		out.body = bytes.TrimRight(b.Bytes(), "\n")
	}
	if out.body != nil && out.header.Get("Content-Type") == "" {
		out.header.Set("Content-Type", "application/json")
	}
	if w.idem != "" {
		if key := effectID(req); key != "" {
			out.header.Set(w.idem, key)
		}
	}
	return out, nil
}

// answer reads a 2xx: the write was applied, and the output is the status,
// the selected headers and the body (JSON as JSON, anything else as a
// string, none as null). A 2xx is never a protocol response here.
func (w *httpWire) answer(req *Request, t tryResult) *Result {
	headers := map[string]string{}
	for _, name := range OutputHeaders {
		if v := t.header.Get(name); v != "" {
			headers[name] = v
		}
	}
	var body json.RawMessage = json.RawMessage("null")
	if len(bytes.TrimSpace(t.body)) > 0 {
		body = bodyJSON(t.body)
	}
	out, err := json.Marshal(struct {
		Status  int               `json:"status"`
		Headers map[string]string `json:"headers"`
		Body    json.RawMessage   `json:"body"`
	}{t.status, headers, body})
	if err != nil {
		// bodyJSON gives valid JSON; this is the compacting's own failure.
		return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EINTERNAL, "encode the answer: %v", err))
	}
	res := &Result{OK: true, Output: out, Dispatched: true}
	if req.Context.Effect != nil {
		res.Outcome = touba.EffectApplied
	}
	return cleanAnswer(res)
}
