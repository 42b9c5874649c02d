package tracing_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/touba/touba-trigger/tracing"
)

const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

type okHandler struct{}

func (*okHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusAccepted)
}

func unsetOTEL(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		t.Setenv(k, "")
	}
}

// TestSetupOff: with no endpoint configured Setup starts no provider, the
// middleware is not installed and every span is a no-op.
func TestSetupOff(t *testing.T) {
	unsetOTEL(t)
	tr, err := tracing.Setup(context.Background(), "test", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if tr.Enabled() {
		t.Fatal("Enabled with no OTLP endpoint")
	}
	h := &okHandler{}
	if got := tr.Middleware(h); got != http.Handler(h) {
		t.Fatalf("Middleware wrapped the handler with tracing off")
	}
	ctx, span := tr.StartRun(context.Background(), tracing.Run{TraceParent: parent, QueueID: "q1"})
	if span.IsRecording() || tracing.TraceParent(ctx) != "" {
		t.Fatalf("run span recording=%v traceparent=%q with tracing off", span.IsRecording(), tracing.TraceParent(ctx))
	}
	if err := tr.Shutdown(0); err != nil {
		t.Fatal(err)
	}
}

// TestSetupDisabled: OTEL_SDK_DISABLED wins over an endpoint.
func TestSetupDisabled(t *testing.T) {
	unsetOTEL(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:1/v1/traces")
	if !tracing.Configured(func(k string) string { return map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "x"}[k] }) {
		t.Fatal("a traces endpoint alone does not configure tracing")
	}
	t.Setenv("OTEL_SDK_DISABLED", "true")
	tr, err := tracing.Setup(context.Background(), "test", zerolog.Nop())
	if err != nil || tr.Enabled() {
		t.Fatalf("Setup with OTEL_SDK_DISABLED=true: enabled=%v err=%v", tr.Enabled(), err)
	}
}

// TestSamplerFromEnv: the SDK reads OTEL_TRACES_SAMPLER.
func TestSamplerFromEnv(t *testing.T) {
	for sampler, recording := range map[string]bool{"always_off": false, "always_on": true} {
		t.Run(sampler, func(t *testing.T) {
			unsetOTEL(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			t.Setenv("OTEL_TRACES_SAMPLER", sampler)
			tr, err := tracing.Setup(context.Background(), "test", zerolog.Nop())
			if err != nil || !tr.Enabled() {
				t.Fatalf("Setup: enabled=%v err=%v", tr.Enabled(), err)
			}
			_, span := tr.StartRun(context.Background(), tracing.Run{QueueID: "q1"})
			if span.IsRecording() != recording {
				t.Fatalf("recording=%v under %s", span.IsRecording(), sampler)
			}
			span.End()
			_ = tr.Shutdown(0) // nothing listens on port 1: the export fails, fast
		})
	}
}

func recorder() (*tracing.Tracing, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	return tracing.WithProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))), rec
}

// TestSpans checks the run tree in process: intake under the sender,
// run as child of and linked to the stored intake context, the call's
// traceparent, an unknown outcome and a parked run as errors.
func TestSpans(t *testing.T) {
	tr, rec := recorder()
	var stored string
	h := tr.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stored = tracing.TraceParent(r.Context())
		tracing.AnnotateIntake(w, "trigger:t", "e1", "q1", "enqueued")
		w.WriteHeader(http.StatusAccepted)
	}))
	req := httptest.NewRequest(http.MethodPost, "/triggers/t", strings.NewReader("{}"))
	req.Header.Set("Traceparent", parent)
	h.ServeHTTP(httptest.NewRecorder(), req)

	ctx, run := tr.StartRun(context.Background(), tracing.Run{TraceParent: stored, QueueID: "q1", Attempt: 1})
	sctx, step := tr.StartStep(ctx, "s1", "tool:x")
	cctx, call := tr.StartCall(sctx, tracing.Call{ToolRef: "tool:x", CallID: "c1", EffectID: "q1:s1", RetryMode: "reconcile"})
	callParent := tracing.TraceParent(cctx)
	tracing.EndCall(call, "unknown", true, "", "")
	tracing.EndStep(step, "EffectReconciliationRequired", "reconcile it")
	tracing.EndRun(run, "parked", "EffectReconciliationRequired", "reconcile it")

	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s
	}
	in, r, c := spans[tracing.SpanIntake], spans[tracing.SpanRun], spans[tracing.SpanCall]
	if in == nil || r == nil || c == nil || spans[tracing.SpanStep] == nil {
		t.Fatalf("spans %v", spans)
	}
	if in.Parent().SpanID().String() != "00f067aa0ba902b7" || in.SpanKind() != trace.SpanKindServer {
		t.Fatalf("intake parent %s kind %v", in.Parent().SpanID(), in.SpanKind())
	}
	if r.Parent().SpanID() != in.SpanContext().SpanID() || len(r.Links()) != 1 ||
		r.Links()[0].SpanContext.SpanID() != in.SpanContext().SpanID() {
		t.Fatalf("run parent %s links %v, want child of and linked to intake %s", r.Parent().SpanID(), r.Links(), in.SpanContext().SpanID())
	}
	if want := "00-" + c.SpanContext().TraceID().String() + "-" + c.SpanContext().SpanID().String() + "-01"; callParent != want {
		t.Fatalf("call traceparent %q, want %q", callParent, want)
	}
	if c.Status().Code != codes.Error || r.Status().Code != codes.Error {
		t.Fatalf("status: call %v run %v, want errors", c.Status(), r.Status())
	}
	if ev := r.Events(); len(ev) != 1 || ev[0].Name != "touba.run.parked" {
		t.Fatalf("run events %v, want touba.run.parked", ev)
	}
	if sc := tracing.Remote(stored); sc.SpanID() != in.SpanContext().SpanID() || !sc.IsRemote() {
		t.Fatalf("Remote(%q) = %v", stored, sc)
	}
}

// BenchmarkOff is intake's and a run's tracing work with tracing off: it
// must cost a few nanoseconds and no allocation per delivery.
func BenchmarkOff(b *testing.B) {
	tr := tracing.Off()
	ctx := context.Background()
	var w http.ResponseWriter = httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		tracing.AnnotateIntake(w, "trigger:t", "e1", "q1", "enqueued")
		_ = tracing.TraceParent(ctx)
		rctx, run := tr.StartRun(ctx, tracing.Run{TraceParent: parent, QueueID: "q1"})
		sctx, step := tr.StartStep(rctx, "s1", "tool:x")
		cctx, call := tr.StartCall(sctx, tracing.Call{ToolRef: "tool:x", CallID: "c1"})
		_ = tracing.TraceParent(cctx)
		tracing.EndCall(call, "ok", true, "", "")
		tracing.EndStep(step, "", "")
		tracing.EndRun(run, "done", "", "")
	}
}

// TestRemoteMatchesPropagator: the hand-written traceparent parser and
// writer agree with the W3C propagator, on good values and bad ones.
func TestRemoteMatchesPropagator(t *testing.T) {
	for _, tp := range []string{parent,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bx-01",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
	} {
		want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(),
			propagation.MapCarrier{"traceparent": tp}))
		if got := tracing.Remote(tp); !got.Equal(want) {
			t.Errorf("Remote(%q) = %v, want %v", tp, got, want)
		}
		if want.IsValid() {
			carrier := propagation.MapCarrier{}
			propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), want), carrier)
			if got := tracing.TraceParent(trace.ContextWithSpanContext(context.Background(), want)); got != carrier["traceparent"] {
				t.Errorf("TraceParent = %q, want %q", got, carrier["traceparent"])
			}
		}
	}
}

// TestLogHook: trace_id is the span's trace id in hex, as TraceID renders it.
func TestLogHook(t *testing.T) {
	var buf bytes.Buffer
	log := zerolog.New(&buf).Hook(tracing.LogHook{})
	sc := tracing.Remote(parent)
	log.Info().Ctx(trace.ContextWithSpanContext(context.Background(), sc)).Msg("x")
	log.Info().Ctx(context.Background()).Msg("y")
	if want := `{"level":"info","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","message":"x"}` + "\n" +
		`{"level":"info","message":"y"}` + "\n"; buf.String() != want {
		t.Fatalf("logged %q, want %q", buf.String(), want)
	}
}
