package tracing

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

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
//
// Every attribute is set once, when the answer is known, from a pooled
// per-request writer: each SetAttributes call grows the SDK's attribute
// slice, so one call instead of four saves copies, and the pool saves the
// wrapper's allocation. No sampler the OTEL_TRACES_SAMPLER variable can
// name reads attributes at span start, so none is lost by setting them late.
func (t *Tracing) Middleware(next http.Handler) http.Handler {
	if !t.Enabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/triggers/") {
			next.ServeHTTP(w, r)
			return
		}
		ctx := r.Context()
		if r.Header.Get("Traceparent") != "" {
			ctx = propagator.Extract(ctx, propagation.HeaderCarrier(r.Header))
		}
		ctx, span := t.tracer.Start(ctx, SpanIntake, serverKind)
		defer span.End() // even if next panics
		sw := writers.Get().(*statusWriter)
		*sw = statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r.WithContext(ctx))
		if span.IsRecording() {
			span.SetAttributes(sw.attributes(r)...)
			// Server spans mark 5xx as errors; a 4xx is the sender's fault
			// and is told by error.type and the answer code (semantic
			// conventions).
			if sw.status >= 500 {
				span.SetStatus(codes.Error, http.StatusText(sw.status))
			}
		}
		*sw = statusWriter{} // drop the request's strings before pooling
		writers.Put(sw)
	})
}

var serverKind = trace.WithSpanKind(trace.SpanKindServer)

// writers pools the per-request statusWriter of Middleware.
var writers = sync.Pool{New: func() any { return new(statusWriter) }}

// attributes returns the intake span's attributes, in sw's own array: the
// HTTP server span's (OpenTelemetry HTTP semantic conventions: the required
// ones, the conditionally required ones that apply, and the recommended
// server and client addresses) and intake's answer.
// network.protocol.version and user_agent.original, recommended only, are
// left out: they tell nothing about a delivery the trigger does not.
func (sw *statusWriter) attributes(r *http.Request) []attribute.KeyValue {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	attrs := append(sw.attrs[:0], semconv.HTTPRequestMethodKey.String(r.Method), semconv.HTTPRoute(IntakeRoute),
		semconv.URLPath(r.URL.Path), semconv.URLScheme(scheme), semconv.HTTPResponseStatusCode(sw.status))
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
	if sw.status >= 400 {
		attrs = append(attrs, semconv.ErrorTypeKey.String(strconv.Itoa(sw.status)))
	}
	if sw.annotated {
		attrs = append(attrs, AttrTriggerRef.String(sw.triggerRef), AttrEventID.String(sw.eventID),
			AttrAnswerCode.String(sw.answerCode))
		if sw.queueID != "" {
			attrs = append(attrs, AttrQueueID.String(sw.queueID))
		}
	}
	return attrs
}

// AnnotateIntake records what intake decided for the request's touba.intake
// span: the trigger, event id, queue id (where one exists) and answer code.
// w is the ResponseWriter the handler was given; when it is not
// Middleware's (tracing off), this does nothing and builds nothing.
func AnnotateIntake(w http.ResponseWriter, triggerRef, eventID, queueID, answerCode string) {
	for {
		switch v := w.(type) {
		case *statusWriter:
			v.annotated = true
			v.triggerRef, v.eventID, v.queueID, v.answerCode = triggerRef, eventID, queueID, answerCode
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = v.Unwrap()
		default:
			return
		}
	}
}

// statusWriter remembers the status a handler answered and what intake
// decided, for the span's attributes.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool

	annotated                                bool
	triggerRef, eventID, queueID, answerCode string
	attrs                                    [14]attribute.KeyValue
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
