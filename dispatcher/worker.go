package dispatcher

import (
	"context"
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/internal/secret"
)

// A worker binding (SPEC §4.3) is one more hold (SPEC §2.2 "Holds take
// nothing"): its calls can start only while a worker has a take open
// with room, so its budget in a lease is that room (passable), a trigger
// whose first bound binding it is waits unleased while there is none
// (gate), and a run that reaches it without room is handed back on it
// (tryAcquire), to be leased again when a take opens (the Hub calls
// Notify). A call leased for room that a take no longer has (it answered
// with fewer calls, or its worker went away) ends unsent with
// WorkerUnavailable after a short wait, and its run is handed back too.

// taker is a worker binding's runner (worker.Runner) as the holds see it.
type taker interface {
	// Free is how many more calls the open takes could take now.
	Free() int
	// Reserve counts the run of queueID leased for that room until its
	// call waits for a worker (which takes the reservation over) or
	// Unreserve.
	Reserve(queueID string)
	Unreserve(queueID string)
}

// takerOf is b's runner when b is a worker binding, else nil.
func takerOf(b *Binding) taker {
	if b == nil {
		return nil
	}
	t, _ := b.Runner.(taker)
	return t
}

// noWorker is the verdict of a run whose worker binding has no worker
// with room: handed back on the binding, no attempt spent.
func noWorker(b *Binding, why string) *verdict {
	if why == "" {
		why = fmt.Sprintf("no worker of %s has room for the call; the run waits for one", b.Ref)
	}
	return &verdict{action: held, hold: b.Ref, code: touba.EWorkerUnavailable, message: why}
}

// untaken is the hold of a worker binding's call that no worker took
// (unsent, WorkerUnavailable): the run is handed back on the binding
// instead of spending an attempt; nil for any other result, or without a
// store that takes runs back (the call then is retried like any unsent
// one).
func (d *Dispatcher) untaken(b *Binding, res *handler.Result) *verdict {
	if d.fair == nil || res.Dispatched || res.Err == nil || res.Err.Code != touba.EWorkerUnavailable || takerOf(b) == nil {
		return nil
	}
	return noWorker(b, res.Err.Message)
}

// callAtHandOut runs an external write of a worker binding whose effect
// is prepared by the take that hands the call out: prepared and
// dispatched in one commit, shared with the take's other calls (the
// runner's hook runs before the request is encoded, so the request
// carries the attempt the prepare counted). Nothing is journaled while
// the call waits for a take: a crash then leaves nothing, and the run
// prepares again after a restart, as it would have from prepared. Nothing
// is sent before that commit: a crash after it reads dispatched, unknown,
// as one after a hand-out always did (docs/performance.md, "Prepared and
// dispatched in one commit").
//
// prepErr is the journal's refusal (the effect applied, unknown, in
// progress): the take left the call out, unsent, and the caller answers
// it as any refused prepare. prepared is false when no take handed the
// call out (no worker came, the run was cancelled): nothing was
// journaled, and res says why.
func (d *Dispatcher) callAtHandOut(ctx context.Context, secrets *secret.Set, b *Binding, pd prepareDispatcher,
	p touba.EffectPrepare, req *handler.Request) (res *handler.Result, prepErr error, prepared bool) {
	// The circuit hears only of calls handed out: one never prepared
	// (refused, no worker came) says nothing of the handler, and its
	// pass, unused, frees a probe for another run.
	pass := passOf(ctx)
	defer func() {
		if prepared {
			pass.done(res)
		}
	}()
	ctx = context.WithValue(ctx, passKey{}, (*circuitPass)(nil))
	res = d.call(ctx, secrets, b, req, func() error {
		if err := context.Cause(ctx); err != nil {
			// The run is stopping: the call ends unsent, nothing journaled.
			return touba.Errorf(touba.EWorkerUnavailable, "call cancelled before a worker took it (%v)", err)
		}
		eff, err := pd.PrepareDispatched(ctx, p)
		if err != nil {
			prepErr = err
			return err
		}
		prepared = true
		crashpoint.Hit(CrashAfterPrepared)
		req.Context.Effect = &handler.Effect{Scope: p.Scope, EffectID: p.EffectID, Fingerprint: p.Fingerprint,
			RetryMode: b.Contract.RetryMode, Attempt: eff.Attempts}
		crashpoint.Hit(CrashAfterDispatched)
		return nil
	})
	// The hook ran, if at all, before the runner's result was delivered
	// (the Hub hands the result over a channel after it): prepErr and
	// prepared are this goroutine's to read now.
	return res, prepErr, prepared
}

// notSent is the verdict of a call that certainly did not happen (what:
// an effect not applied, a worker binding's call no take handed out): the
// run is handed back on the binding (untaken), or its error decides.
func (d *Dispatcher) notSent(b *Binding, res *handler.Result, log *callLog, what string) *verdict {
	if v := d.untaken(b, res); v != nil {
		return v
	}
	err := res.Err
	if err == nil {
		err = touba.Errorf(touba.EHandlerFailed, "%s", what)
	}
	log.get().Info().Str("code", err.Code).Str("reason", err.Message).Msg(what)
	return fromError(err)
}
