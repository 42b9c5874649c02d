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

type tryFailedKey struct{}

// WithFailedTry returns ctx carrying failed, which a runner that retries
// within one call calls for each try that failed on the host's side (a
// 5xx, a 429, a timeout, a connection refused or lost) and that it will
// try again: a circuit counts tries, not only calls (SPEC §2.2, issue 43).
// The call's last try is the call's result, counted by the caller.
func WithFailedTry(ctx context.Context, failed func()) context.Context {
	if failed == nil {
		return ctx
	}
	return context.WithValue(ctx, tryFailedKey{}, failed)
}

// tryFailed tells ctx's observer (if any) that a try failed and another
// may follow.
func tryFailed(ctx context.Context) {
	if f, ok := ctx.Value(tryFailedKey{}).(func()); ok {
		f()
	}
}
