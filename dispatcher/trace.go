package dispatcher

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/tracing"
)

// callSpan is what the touba.handler.call span of req tells.
func callSpan(b *Binding, req *handler.Request) tracing.Call {
	c := tracing.Call{ToolRef: b.Ref, Operation: string(req.Operation), CallID: req.Context.CallID}
	if e := req.Context.Effect; e != nil {
		c.EffectID, c.RetryMode, c.EffectAttempt = e.EffectID, e.RetryMode, e.Attempt
	}
	return c
}

// endCallSpan ends a call's span with its outcome; an error's message is
// the one call already stripped of secret values.
func endCallSpan(span trace.Span, outcome string, res *handler.Result) {
	code, msg := "", ""
	if res.Err != nil {
		code, msg = res.Err.Code, res.Err.Message
	}
	tracing.EndCall(span, outcome, res.Dispatched, code, msg)
}
