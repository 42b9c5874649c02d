package tracing

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// Span names (SPEC §7).
const (
	SpanIntake = "touba.intake"
	SpanRun    = "touba.run"
	SpanStep   = "touba.step"
	SpanCall   = "touba.handler.call"
)

// Attributes of touba's own, beside the semantic conventions'.
const (
	AttrTriggerRef  = attribute.Key("touba.trigger_ref")
	AttrEventID     = attribute.Key("touba.event_id")
	AttrQueueID     = attribute.Key("touba.queue_id")
	AttrAnswerCode  = attribute.Key("touba.answer_code") // enqueued, duplicate, filtered or the error code
	AttrRunID       = attribute.Key("touba.run_id")
	AttrAttempt     = attribute.Key("touba.attempt")
	AttrRunStatus   = attribute.Key("touba.run.status")
	AttrErrorCode   = attribute.Key("touba.error_code")
	AttrStepID      = attribute.Key("touba.step_id")
	AttrToolRef     = attribute.Key("touba.tool_ref")
	AttrCallID      = attribute.Key("touba.call_id")
	AttrEffectID    = attribute.Key("touba.effect_id")
	AttrRetryMode   = attribute.Key("touba.retry_mode")
	AttrOutcome     = attribute.Key("touba.outcome")
	AttrDispatched  = attribute.Key("touba.dispatched")
	AttrParkReason  = attribute.Key("touba.park.reason")
	AttrOperation   = attribute.Key("touba.operation")
	AttrEffectTries = attribute.Key("touba.effect.attempt")
)

// IntakeRoute is the http.route of the intake span.
const IntakeRoute = "/triggers/{name}"

// Middleware wraps the daemon's HTTP handler with the touba.intake server
// span for requests under /triggers/ (probes on /healthz and /readyz are not
// traced). The span is a child of the request's W3C traceparent header when
// it has a valid one. The intake handler adds the trigger, event id, queue
// id and answer code with AnnotateIntake. With tracing off next is returned
// as it is: no wrapper, no cost.
func (t *Tracing) Middleware(next http.Handler) http.Handler {
	if !t.Enabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/triggers/") {
			next.ServeHTTP(w, r)
			return
		}
		ctx := propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := t.tracer.Start(ctx, SpanIntake, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(serverAttrs(r)...))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r.WithContext(ctx))
		span.SetAttributes(semconv.HTTPResponseStatusCode(sw.status))
		// Server spans mark 5xx as errors; a 4xx is the sender's fault and
		// is told by error.type and the answer code (semantic conventions).
		if sw.status >= 400 {
			span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(sw.status)))
		}
		if sw.status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.status))
		}
	})
}

// serverAttrs are the HTTP server span attributes known before the handler
// runs (OpenTelemetry HTTP semantic conventions).
func serverAttrs(r *http.Request) []attribute.KeyValue {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs, semconv.HTTPRequestMethodKey.String(r.Method), semconv.HTTPRoute(IntakeRoute),
		semconv.URLPath(r.URL.Path), semconv.URLScheme(scheme),
		semconv.NetworkProtocolVersion(strings.TrimPrefix(r.Proto, "HTTP/")))
	if host, port, err := net.SplitHostPort(r.Host); err == nil {
		attrs = append(attrs, semconv.ServerAddress(host))
		if p, err := strconv.Atoi(port); err == nil {
			attrs = append(attrs, semconv.ServerPort(p))
		}
	} else if r.Host != "" {
		attrs = append(attrs, semconv.ServerAddress(r.Host))
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		attrs = append(attrs, semconv.ClientAddress(host))
	}
	if ua := r.UserAgent(); ua != "" {
		attrs = append(attrs, semconv.UserAgentOriginal(ua))
	}
	return attrs
}

// AnnotateIntake adds what intake decided to the request's touba.intake
// span: the trigger, event id, queue id (where one exists) and answer code.
// It does nothing, and builds nothing, when the span is not recording.
func AnnotateIntake(ctx context.Context, triggerRef, eventID, queueID, answerCode string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(AttrTriggerRef.String(triggerRef), AttrEventID.String(eventID),
		AttrAnswerCode.String(answerCode))
	if queueID != "" {
		span.SetAttributes(AttrQueueID.String(queueID))
	}
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flush,
// deadlines, the lingering close after a 413).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
