package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Run identifies one run attempt of a queue entry, for its touba.run span.
type Run struct {
	TraceParent string // the intake span context stored with the entry
	TriggerRef  string
	EventID     string
	QueueID     string
	RunID       string
	Attempt     int
}

// StartRun starts the touba.run span of one run attempt: a child of the
// entry's stored intake span context, and linked to it (see the package
// doc for why both). An entry without a stored context (enqueued with
// tracing off, or replayed from before) starts a trace of its own. With
// tracing off it returns ctx and its non-recording span.
func (t *Tracing) StartRun(ctx context.Context, r Run) (context.Context, trace.Span) {
	if !t.Enabled() {
		return ctx, trace.SpanFromContext(ctx)
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(AttrTriggerRef.String(r.TriggerRef), AttrEventID.String(r.EventID),
			AttrQueueID.String(r.QueueID), AttrRunID.String(r.RunID), AttrAttempt.Int(r.Attempt))}
	if sc := Remote(r.TraceParent); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc,
			Attributes: []attribute.KeyValue{attribute.String("touba.link", "intake")}}))
	} else {
		ctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{}) // a new root, whatever ctx held
	}
	return t.tracer.Start(ctx, SpanRun, opts...)
}

// EndRun ends a touba.run span with how the run ended: status is done,
// failed, parked, retry or interrupted. Anything but done sets the error
// status; a parked run also gets a touba.run.parked event with its reason,
// the thing an operator reading the trace needs.
func EndRun(span trace.Span, status, code, message string) {
	if span.IsRecording() {
		span.SetAttributes(AttrRunStatus.String(status))
		if code != "" {
			span.SetAttributes(AttrErrorCode.String(code))
		}
		if status == "parked" {
			span.AddEvent("touba.run.parked", trace.WithAttributes(AttrErrorCode.String(code),
				AttrParkReason.String(message)))
		}
		if status != "done" {
			span.SetStatus(codes.Error, code+": "+message)
		}
	}
	span.End()
}

// StartStep starts the touba.step span of one step of a run.
func (t *Tracing) StartStep(ctx context.Context, stepID, toolRef string) (context.Context, trace.Span) {
	if !t.Enabled() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.tracer.Start(ctx, SpanStep, trace.WithAttributes(AttrStepID.String(stepID), AttrToolRef.String(toolRef)))
}

// EndStep ends a touba.step span; a non-empty code sets the error status.
func EndStep(span trace.Span, code, message string) {
	if code != "" && span.IsRecording() {
		span.SetAttributes(AttrErrorCode.String(code))
		span.SetStatus(codes.Error, code+": "+message)
	}
	span.End()
}

// Call identifies one handler call, for its touba.handler.call span.
type Call struct {
	ToolRef, Operation, CallID string
	EffectID, RetryMode        string // empty for a call without an effect
	EffectAttempt              int
}

// StartCall starts the touba.handler.call client span of one handler call.
// The handler request's context.traceparent is TraceParent of the returned
// context, so the handler's own spans join this trace.
func (t *Tracing) StartCall(ctx context.Context, c Call) (context.Context, trace.Span) {
	if !t.Enabled() {
		return ctx, trace.SpanFromContext(ctx)
	}
	attrs := []attribute.KeyValue{AttrToolRef.String(c.ToolRef), AttrOperation.String(c.Operation),
		AttrCallID.String(c.CallID)}
	if c.EffectID != "" {
		attrs = append(attrs, AttrEffectID.String(c.EffectID), AttrRetryMode.String(c.RetryMode),
			AttrEffectTries.Int(c.EffectAttempt))
	}
	return t.tracer.Start(ctx, SpanCall, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// EndCall ends a touba.handler.call span with the call's outcome (ok,
// error, applied, not_applied or unknown). An error answer, and an unknown
// outcome even without one, set the error status.
func EndCall(span trace.Span, outcome string, dispatched bool, code, message string) {
	if span.IsRecording() {
		span.SetAttributes(AttrOutcome.String(outcome), AttrDispatched.Bool(dispatched))
		switch {
		case code != "":
			span.SetAttributes(AttrErrorCode.String(code))
			span.SetStatus(codes.Error, code+": "+message)
		case outcome == "unknown":
			span.SetStatus(codes.Error, "effect outcome unknown")
		}
	}
	span.End()
}
