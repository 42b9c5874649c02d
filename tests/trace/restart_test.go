package trace_test

import (
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// TestTraceAcrossRestart posts a delivery with a known traceparent to a
// daemon that runs no handler, stops it, and lets a second process run the
// entry. The intake span reaches the receiver only through the first
// process's flush at shutdown (its batch delay is a minute), and the run of
// the second process joins the same trace through the context stored with
// the entry.
func TestTraceAcrossRestart(t *testing.T) {
	rcv := newReceiver(t)
	s := newSetup(t)
	otel := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.URL(), "OTEL_TRACES_SAMPLER=parentbased_always_on"}

	d1 := s.start(t, append(otel, "OTEL_BSP_SCHEDULE_DELAY=60000"), 0)
	queueID := post(t, d1, "evt-trace-1", senderParent)
	d1.WaitLog(`"trace_id":"`+senderTrace+`"`, 10*time.Second) // the enqueue log line joins the trace
	stop(t, d1)
	spans := rcv.wait(t, "the intake span, flushed at shutdown", 10*time.Second, func(ss []span) bool {
		return len(named(ss, "touba.intake")) == 1
	})
	in := named(spans, "touba.intake")[0]
	if in.traceID() != senderTrace || in.parentID() != senderSpan {
		t.Fatalf("intake span trace=%s parent=%s, want %s under %s", in.traceID(), in.parentID(), senderTrace, senderSpan)
	}
	if in.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Fatalf("intake span kind %v, want server", in.Kind)
	}
	for key, want := range map[string]string{
		"touba.trigger_ref": "trigger:trace/Orders", "touba.event_id": "evt-trace-1", "touba.queue_id": queueID,
		"touba.answer_code": "enqueued", "http.request.method": "POST", "http.route": "/triggers/{name}",
		"url.path": "/triggers/trace/Orders", "http.response.status_code": "202", "server.address": "127.0.0.1",
	} {
		if got := in.attr(key); got != want {
			t.Errorf("intake span %s=%q, want %q", key, got, want)
		}
	}
	if in.service != "touba-trigger" {
		t.Errorf("service.name=%q, want the default touba-trigger", in.service)
	}
	if n := len(named(spans, "touba.run")); n != 0 {
		t.Fatalf("%d run spans from a daemon with --workers 0", n)
	}

	d2 := s.start(t, append(otel, "OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_SERVICE_NAME=touba-trace-test"), 1)
	spans = rcv.wait(t, "run, step and call spans", 30*time.Second, func(ss []span) bool {
		return len(named(ss, "touba.run")) == 1 && len(named(ss, "touba.step")) == 2 &&
			len(named(ss, "touba.handler.call")) == 2
	})
	d2.WaitLog(`"run done"`, 10*time.Second)
	run := named(spans, "touba.run")[0]
	if run.traceID() != senderTrace || run.parentID() != in.spanID() {
		t.Fatalf("run span trace=%s parent=%s, want a child of intake %s", run.traceID(), run.parentID(), in.spanID())
	}
	if len(run.Links) != 1 || string(run.Links[0].SpanId) != string(in.SpanId) {
		t.Fatalf("run span links %v, want one to the intake span %s", run.Links, in.spanID())
	}
	if run.attr("touba.queue_id") != queueID || run.attr("touba.run.status") != "done" || run.service != "touba-trace-test" {
		t.Fatalf("run span queue_id=%q status=%q service=%q", run.attr("touba.queue_id"), run.attr("touba.run.status"), run.service)
	}
	steps := map[string]span{}
	for _, st := range named(spans, "touba.step") {
		if st.parentID() != run.spanID() {
			t.Fatalf("step %s parent %s, want the run %s", st.attr("touba.step_id"), st.parentID(), run.spanID())
		}
		steps[st.spanID()] = st
	}
	calls := map[string]span{} // by step id
	for _, c := range named(spans, "touba.handler.call") {
		st, ok := steps[c.parentID()]
		if !ok || c.Kind != tracepb.Span_SPAN_KIND_CLIENT || c.traceID() != senderTrace {
			t.Fatalf("call span %s: parent %s kind %v trace %s, want a client span under a step", c.spanID(), c.parentID(), c.Kind, c.traceID())
		}
		calls[st.attr("touba.step_id")] = c
	}
	hook := calls["hook"]
	if got, want := hook.attr("touba.effect_id"), queueID+":hook"; got != want {
		t.Errorf("hook call effect_id=%q, want %q", got, want)
	}
	if hook.attr("touba.retry_mode") != "idempotency_key" || hook.attr("touba.outcome") != "applied" {
		t.Errorf("hook call retry_mode=%q outcome=%q", hook.attr("touba.retry_mode"), hook.attr("touba.outcome"))
	}
	if got := calls["proc"].attr("touba.outcome"); got != "ok" {
		t.Errorf("proc call outcome=%q, want ok", got)
	}

	// What the handlers saw: the traceparent of their own call span.
	if got, want := seenLines(t, s.seenFile), []string{"00-" + senderTrace + "-" + calls["proc"].spanID() + "-01"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("process handler saw traceparent %q, want %q", got, want)
	}
	if got, want := s.hook.traceparents(), []string{"00-" + senderTrace + "-" + hook.spanID() + "-01"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("webhook received traceparent %q, want %q", got, want)
	}
	if !strings.Contains(d2.Log(), `"trace_id":"`+senderTrace+`"`) {
		t.Errorf("dispatcher log lines carry no trace_id\n%s", d2.Log())
	}
	stop(t, d2)
}

// TestTracingOff runs a delivery with a traceparent through a daemon with
// no OTLP traces endpoint: no exporter starts (no start-up line, nothing
// reaches the receiver, which is named only as the metrics endpoint, so an
// exporter started from any OTLP variable would reach it), the handlers get
// no traceparent although the sender sent one, and the logs no trace_id.
func TestTracingOff(t *testing.T) {
	rcv := newReceiver(t)
	s := newSetup(t)
	env := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=",
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=" + rcv.URL(), "OTEL_BSP_SCHEDULE_DELAY=10"}
	d := s.start(t, env, 1)
	post(t, d, "evt-off-1", senderParent)
	d.WaitLog(`"run done"`, 30*time.Second)
	stop(t, d)
	if n := rcv.Requests(); n != 0 {
		t.Fatalf("receiver got %d exports with tracing off", n)
	}
	if got := seenLines(t, s.seenFile); len(got) != 1 || got[0] != "" {
		t.Fatalf("process handler saw traceparent %q with tracing off, want none", got)
	}
	if got := s.hook.traceparents(); len(got) != 1 || got[0] != "" {
		t.Fatalf("webhook received traceparent %q with tracing off, want none", got)
	}
	if log := d.Log(); strings.Contains(log, "trace_id") || strings.Contains(log, "exporting traces") {
		t.Fatalf("tracing-off log mentions traces\n%s", log)
	}
}
