package handler

import "context"

// The try gate: a runner that retries within one call (the webhook
// runner) asks the caller, through the call's context, before each try
// after the first, so that a circuit opening while the call is in flight
// stops the tries it has not sent yet (SPEC §2.2). The call then ends as
// it would had its retry budget run out there: with the last try's result.

type tryGateKey struct{}

// WithTryGate returns ctx carrying allow: a runner asks it before each
// try after the first, and sends none once it answers false (a circuit
// opened while the call was in flight, SPEC §2.2). A nil allow adds no
// gate; a gate already in ctx is kept, and both must allow a try.
func WithTryGate(ctx context.Context, allow func() bool) context.Context {
	if allow == nil {
		return ctx
	}
	if outer, ok := ctx.Value(tryGateKey{}).(func() bool); ok {
		inner := allow
		allow = func() bool { return outer() && inner() }
	}
	return context.WithValue(ctx, tryGateKey{}, allow)
}

// TryAllowed reports whether ctx's gate (if any) lets another try go.
func TryAllowed(ctx context.Context) bool {
	allow, ok := ctx.Value(tryGateKey{}).(func() bool)
	return !ok || allow()
}
