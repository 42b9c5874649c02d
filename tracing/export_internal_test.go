package tracing

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// TestExportErrorsWarnOnceAMinute: a collector that is down fails every
// batch; the log gets one line a minute, which says how many it held back.
func TestExportErrorsWarnOnceAMinute(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	dropped := new(atomic.Uint64)
	h := &errorHandler{log: zerolog.New(&buf), now: func() time.Time { return now }, dropped: dropped}
	for i := 0; i < 30; i++ { // a batch every 2 s for a minute
		dropped.Add(5)
		h.Handle(errors.New("connection refused"))
		now = now.Add(2 * time.Second)
	}
	if got := strings.Count(buf.String(), "trace export failed"); got != 1 {
		t.Fatalf("%d warnings in the first minute, want 1:\n%s", got, buf.String())
	}
	h.Handle(errors.New("connection refused"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], `"errors_since_last_warning":29`) ||
		!strings.Contains(lines[1], `"spans_dropped_total":150`) {
		t.Fatalf("second warning does not count what the minute held:\n%s", buf.String())
	}
	h.closed.Store(true)
	now = now.Add(time.Hour)
	h.Handle(errors.New("after shutdown"))
	if strings.Contains(buf.String(), "after shutdown") {
		t.Fatal("a warning after Shutdown")
	}
}

// failing is an exporter whose every export fails with err.
type failing struct {
	sdktrace.SpanExporter
	err error
}

func (f failing) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return f.err }

// TestExportErrorsHideTheEndpointsCredentials: the OTLP exporter quotes
// the request's URL in its errors, user information and query included; an
// endpoint's token must not reach the log, nor the error Shutdown returns
// (serve logs it), as Endpoint keeps it out of the start line.
func TestExportErrorsHideTheEndpointsCredentials(t *testing.T) {
	var buf bytes.Buffer
	dropped := new(atomic.Uint64)
	h := &errorHandler{log: zerolog.New(&buf), now: time.Now, dropped: dropped}
	cause := errors.New("failed to send to https://tenant:p4ssw0rd-77@collector.example:4318/v1/traces?api-key=s3cr3t-q: 401 Unauthorized")
	e := &exporter{SpanExporter: failing{err: cause}, dropped: dropped, errs: h}
	err := e.ExportSpans(context.Background(), nil)
	for _, text := range []string{buf.String(), err.Error()} {
		if strings.Contains(text, "p4ssw0rd-77") || strings.Contains(text, "s3cr3t-q") || strings.Contains(text, "tenant") {
			t.Fatalf("a credential of the endpoint is shown: %s", text)
		}
		if !strings.Contains(text, "https://collector.example:4318/v1/traces: 401 Unauthorized") {
			t.Fatalf("the redacted error no longer says where and why: %s", text)
		}
	}
	if !errors.Is(err, cause) {
		t.Fatalf("the returned error %v does not unwrap to the exporter's", err)
	}
	// An error the SDK hands the handler itself is redacted too.
	buf.Reset()
	h.last = time.Time{}
	h.Handle(cause)
	if strings.Contains(buf.String(), "p4ssw0rd-77") || strings.Contains(buf.String(), "s3cr3t-q") {
		t.Fatalf("Handle logs a credential: %s", buf.String())
	}
}
