// Package tracing is the daemon's OpenTelemetry tracing (SPEC §3, §7): the
// provider and its OTLP/HTTP exporter, configured only by the standard
// OTEL_* environment variables, and the spans of one delivery's trace:
// touba.intake (server span, child of the sender's traceparent), touba.run
// (one per run attempt), touba.step and touba.handler.call (client span).
//
// A delivery's trace survives the queue: intake stores its span context with
// the entry as a W3C traceparent string, and each run attempt, however much
// later and in whichever process, starts its touba.run span as a child of
// that stored context and also links to it. The child relation puts the
// whole delivery (intake, every attempt, every handler call) in one trace
// that a trace viewer shows as one tree; the link is the SPEC's "linked"
// relation, kept for backends that show links but not late children.
//
// With neither OTEL_EXPORTER_OTLP_ENDPOINT nor
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set, Setup starts nothing and returns
// a no-op Tracing: every span is non-recording, no attribute is built, the
// intake middleware is not installed, and nothing leaves the process.
package tracing

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// DefaultServiceName is service.name when OTEL_SERVICE_NAME (or
// OTEL_RESOURCE_ATTRIBUTES) names none.
const DefaultServiceName = "touba-trigger"

// instrumentation is the tracer's name (the instrumentation scope).
const instrumentation = "github.com/touba/touba-trigger"

// Tracing is the daemon's tracer and, when exporting, its provider.
type Tracing struct {
	tracer  trace.Tracer
	sdk     *sdktrace.TracerProvider // nil when tracing is off
	dropped *atomic.Uint64           // spans the exporter failed to send
	errs    *errorHandler
}

// Off returns a Tracing that records and exports nothing.
func Off() *Tracing {
	return &Tracing{tracer: noop.NewTracerProvider().Tracer(instrumentation)}
}

// Configured reports whether getenv names an OTLP traces endpoint, the one
// condition under which the daemon exports spans (SPEC §3).
// OTEL_SDK_DISABLED=true turns tracing off even then, as the SDK spec says.
func Configured(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup starts tracing from the process environment: an OTLP/HTTP exporter
// behind a batch span processor when an endpoint is configured, and Off()
// otherwise. The exporter, its headers, timeout and compression, the
// sampler (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG), the batch
// processor (OTEL_BSP_*) and the resource (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES) are read by the OpenTelemetry SDK itself.
// Export errors are logged to log, never the exporter's headers.
func Setup(ctx context.Context, version string, log zerolog.Logger) (*Tracing, error) {
	if !Configured(os.Getenv) {
		return Off(), nil
	}
	if err := checkProtocol(os.Getenv); err != nil {
		return nil, err
	}
	httpExp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	// Later detectors win: the environment overrides the default name.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(DefaultServiceName), semconv.ServiceVersion(version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	dropped := new(atomic.Uint64)
	errs := &errorHandler{log: log, now: time.Now, dropped: dropped}
	otel.SetErrorHandler(errs)
	exp := &exporter{SpanExporter: httpExp, dropped: dropped, errs: errs}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	log.Info().Str("endpoint", Endpoint(os.Getenv)).Str("protocol", "http/protobuf").Msg("exporting traces over OTLP/HTTP")
	return &Tracing{tracer: tp.Tracer(instrumentation, trace.WithInstrumentationVersion(version)), sdk: tp,
		dropped: dropped, errs: errs}, nil
}

// WithProvider returns a Tracing on tp, for tests that record spans in
// process (the SDK's tracetest.SpanRecorder).
func WithProvider(tp *sdktrace.TracerProvider) *Tracing {
	return &Tracing{tracer: tp.Tracer(instrumentation), sdk: tp}
}

// Enabled reports whether spans may be recorded and exported.
func (t *Tracing) Enabled() bool { return t != nil && t.sdk != nil }

// Tracer returns the tracer spans are started with.
func (t *Tracing) Tracer() trace.Tracer {
	if t == nil {
		return Off().tracer
	}
	return t.tracer
}

// Shutdown flushes the spans still queued and stops the exporter, within
// timeout: a span ended just before shutdown is exported, not lost.
func (t *Tracing) Shutdown(timeout time.Duration) error {
	if !t.Enabled() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := t.sdk.Shutdown(ctx)
	if t.errs != nil {
		t.errs.closed.Store(true)
	}
	if err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// propagator reads and writes W3C traceparent headers.
var propagator = propagation.TraceContext{}

// TraceParent renders the span context of ctx as a W3C traceparent value,
// or "" when ctx holds no valid span context (tracing off). Written by
// hand: one allocation, where fmt took several (it runs once a delivery).
func TraceParent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	var b [55]byte
	copy(b[:], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:], []byte{byte(sc.TraceFlags() & w3cFlags)})
	return string(b[:])
}

// Remote parses a stored traceparent into a remote span context; the zero
// SpanContext when tp is empty or malformed. The version-00 form
// TraceParent writes is parsed by hand (a run parses one per attempt);
// anything else goes through the W3C propagator.
func Remote(tp string) trace.SpanContext {
	if tp == "" {
		return trace.SpanContext{}
	}
	if len(tp) == 55 && tp[:3] == "00-" && tp[35] == '-' && tp[52] == '-' {
		var c trace.SpanContextConfig
		var flags [1]byte
		if hexInto(c.TraceID[:], tp[3:35]) && hexInto(c.SpanID[:], tp[36:52]) && hexInto(flags[:], tp[53:]) {
			c.TraceFlags, c.Remote = trace.TraceFlags(flags[0])&w3cFlags, true
			if sc := trace.NewSpanContext(c); sc.IsValid() {
				return sc
			}
		}
		return trace.SpanContext{}
	}
	ctx := propagator.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	return trace.SpanContextFromContext(ctx)
}

// w3cFlags are the trace flags W3C defines, the only ones the propagator
// keeps: sampled and random.
const w3cFlags = trace.FlagsSampled | trace.FlagsRandom

// hexInto decodes lowercase hex s into dst (len(s) == 2*len(dst)); false
// on any other character, as the W3C format allows lowercase only.
func hexInto(dst []byte, s string) bool {
	for i := range dst {
		hi, lo := unhex(s[2*i]), unhex(s[2*i+1])
		if hi < 0 || lo < 0 {
			return false
		}
		dst[i] = byte(hi<<4 | lo)
	}
	return true
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c - 'a' + 10)
	}
	return -1
}

// TraceID returns the trace id of ctx's span, or "" when there is none.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

// LogHook adds trace_id to every log event given a context (zerolog's
// Event.Ctx) that belongs to a trace, so logs and traces join. A context
// lookup per event, the id hex-encoded straight into the event (no
// string); nothing when the event has no context or no trace.
type LogHook struct{}

// Run implements zerolog.Hook.
func (LogHook) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	if ctx := e.GetCtx(); ctx != nil {
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			tid := sc.TraceID()
			e.Hex(FieldTraceID, tid[:])
		}
	}
}

// FieldTraceID is the log field holding a trace id.
const FieldTraceID = "trace_id"
