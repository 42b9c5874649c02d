package trace_test

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// span is one exported span with the service.name of its resource.
type span struct {
	*tracepb.Span
	service string
}

func (s span) traceID() string  { return hex.EncodeToString(s.TraceId) }
func (s span) spanID() string   { return hex.EncodeToString(s.SpanId) }
func (s span) parentID() string { return hex.EncodeToString(s.ParentSpanId) }

// attr returns the attribute key as text ("" when absent).
func (s span) attr(key string) string { return attrValue(s.Attributes, key) }

func attrValue(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.Key != key {
			continue
		}
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			return v.StringValue
		case *commonpb.AnyValue_IntValue:
			return strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			if v.BoolValue {
				return "true"
			}
			return "false"
		}
	}
	return ""
}

// receiver is an in-process OTLP/HTTP trace receiver: it decodes each
// POST /v1/traces (protobuf, gzip or not) and keeps the spans.
type receiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	spans    []span
	requests int
	changed  chan struct{} // closed and replaced at every export
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{changed: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.requests++
	for _, rs := range msg.ResourceSpans {
		svc := attrValue(rs.GetResource().GetAttributes(), "service.name")
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, span{Span: s, service: svc})
			}
		}
	}
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = io.Copy(w, bytes.NewReader(out))
}

// URL is the endpoint to give OTEL_EXPORTER_OTLP_ENDPOINT.
func (r *receiver) URL() string { return r.srv.URL }

// Requests returns how many exports arrived.
func (r *receiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// wait waits until ok holds of the spans received so far, and returns
// them; it fails the test after timeout.
func (r *receiver) wait(t *testing.T, what string, timeout time.Duration, ok func([]span) bool) []span {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		spans, changed := append([]span(nil), r.spans...), r.changed
		r.mu.Unlock()
		if ok(spans) {
			return spans
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("receiver never got %s; spans: %s", what, describe(spans))
		}
	}
}

func describe(spans []span) string {
	var b bytes.Buffer
	for _, s := range spans {
		b.WriteString("\n  " + s.Name + " trace=" + s.traceID() + " id=" + s.spanID() + " parent=" + s.parentID())
	}
	return b.String()
}

// named returns the spans called name.
func named(spans []span, name string) []span {
	var out []span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}
