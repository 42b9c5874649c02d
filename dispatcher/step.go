package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/internal/jsonx"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/internal/uuidv7"
	"github.com/touba/touba-trigger/protocol"
	"github.com/touba/touba-trigger/tracing"
	"github.com/touba/touba-trigger/trigger"
)

// step runs one step and returns its output, or the verdict that stops
// the run. An external write goes through the journal (SPEC §5), which
// then holds the output (journaled).
//
// gens are the effect generations of the entry's steps (a resume with new
// effects): the step's effect is named touba.EffectIDFor(queue_id, step,
// gen).
func (d *Dispatcher) step(ctx context.Context, cfg *Config, e *touba.Delivery, runID string, st trigger.Step,
	rc *runContext, gens map[string]int, runLog zerolog.Logger) (out json.RawMessage, journaled bool, v *verdict) {
	// The binding of the configuration in force now, not the one the run
	// started with: a reload closes runners nobody uses any more.
	b := d.cfg.Load().Bindings[st.Tool]
	if b == nil {
		b = cfg.Bindings[st.Tool]
	}
	if b == nil {
		return nil, false, stop(fail, "ToolNotBound", "tool %s has no binding", st.Tool)
	}
	input, err := rc.resolve(cfg, st.Input, st.Inputs)
	if err != nil {
		return nil, false, fromError(asTouba(err))
	}
	var release func()
	var pass *circuitPass
	if d.fair != nil {
		var hv *verdict
		r := reservationOf(ctx)
		own := r != nil && r.ref == b.Ref
		release, pass, hv = d.tryAcquire(ctx, b, e, own)
		if own {
			// A worker binding's reservation stays until the call waits
			// in its Hub (which takes it over) or the run ends: the room
			// it was leased for is not counted free twice meanwhile, so
			// runs leased one by one keep their order.
			r.dropSlots()
		}
		if hv != nil {
			return nil, false, hv
		}
	} else {
		var ok bool
		if release, pass, ok = d.acquire(ctx, b, e); !ok {
			return nil, false, &verdict{action: later, code: touba.EDispatcherStopping, message: "stopped while waiting for a slot of " + b.Ref}
		}
	}
	ctx = withPass(ctx, pass)
	// The slot bounds the calls in flight at the remote (SPEC §2.2): it is
	// given back when the call has answered, not after the journal has
	// written its outcome, so a binding's slots are not spent waiting on
	// the daemon's own disk (docs/performance.md, "Broker destinations").
	released := false
	free := func() {
		if !released {
			released = true
			release()
		}
	}
	defer free()
	callID := uuidv7.New()
	req := &handler.Request{Protocol: protocol.Name, Operation: protocol.Invoke, ToolRef: st.Tool, Input: input,
		Context: handler.Context{TriggerRef: e.TriggerRef, EventID: e.EventID, QueueID: e.QueueID, RunID: runID,
			CallID: callID, Attempt: e.Attempts, Grants: b.Grants}}
	log := &callLog{run: runLog, step: st.ID, callID: callID}
	if !b.ExternalWrite() {
		res := d.call(ctx, cfg.Secrets, b, req, func() error { return nil })
		free()
		if res.OK {
			return rawOrNull(res.Output), false, nil
		}
		if v := d.untaken(b, res); v != nil {
			return nil, false, v
		}
		log.get().Info().Str("code", res.Err.Code).Str("reason", res.Err.Message).Msg("step failed")
		return nil, false, fromError(res.Err)
	}
	out, v = d.effect(ctx, cfg.Secrets, b, e, st, touba.EffectIDFor(e.QueueID, st.ID, gens[st.ID]), req, log, free)
	return out, true, v
}

// effect runs one external write under the journal's rules; answered is
// called once the handler has answered (the binding's slot is given back).
func (d *Dispatcher) effect(ctx context.Context, secrets *secret.Set, b *Binding, e *touba.Delivery, st trigger.Step, effectID string,
	req *handler.Request, log *callLog, answered func()) (json.RawMessage, *verdict) {
	fp, err := handler.FingerprintCanonical(st.Tool, touba.OperationInvoke, req.Input) // resolve made it canonical
	if err != nil {
		return nil, stop(fail, touba.EStepInputUnresolved, "input of step %s: %v", st.ID, err)
	}
	scope, callID := e.QueueID, req.Context.CallID
	log.effectID = effectID
	p := touba.EffectPrepare{Scope: scope, EffectID: effectID, ToolRef: st.Tool,
		Operation: touba.OperationInvoke, Fingerprint: fp, RetryMode: b.Contract.RetryMode, CallID: callID,
		LeaseToken: e.LeaseToken}
	// For an in-process handler, prepared and dispatched go in one commit
	// when the journal can (one fsync wait and one transition fewer per
	// effect): nothing starts and nothing is sent between them, so a crash
	// cannot fall between them in a way that prepared alone would describe
	// better (docs/performance.md, "Prepared and dispatched in one commit").
	// A broker binding re-sends an unknown publish only inside the
	// broker's dedupe window (window.go).
	// An entry's first lease has no effect on record (only a run
	// prepares one, and a run needs a lease): nothing unknown to judge,
	// and no journal read per publish.
	if w, ok := b.Runner.(handler.DedupeWindower); ok && !e.FirstLease {
		if v := d.windowVerdict(ctx, b, w, scope, effectID, log); v != nil {
			return nil, v
		}
	}
	pd, merged := d.journal.(prepareDispatcher)
	if merged && takerOf(b) != nil {
		// A worker binding's call is prepared when a take hands it out,
		// prepared and dispatched in that one commit (worker.go).
		res, prepErr, prepared := d.callAtHandOut(ctx, secrets, b, pd, p, req)
		answered()
		switch {
		case prepErr != nil:
			return d.refused(prepErr, log)
		case !prepared:
			// Nothing of it was journaled: no take handed it out.
			return nil, d.notSent(b, res, log, "call not handed to a worker")
		}
		crashpoint.Hit(CrashAfterAnswer)
		return d.effectEnd(ctx, b, scope, effectID, callID, res, log)
	}
	merged = merged && b.OneCommit
	var eff *touba.Effect
	if merged {
		eff, err = pd.PrepareDispatched(ctx, p)
	} else {
		eff, err = d.journal.Prepare(ctx, p)
	}
	if err != nil {
		if w, ok := b.Runner.(handler.DedupeWindower); ok {
			// An unknown publish met again (after a restart, a replay):
			// the park names the message to look for.
			if c := touba.ErrorCode(err); c == touba.EEffectReconciliationRequired || c == touba.EEffectOutcomeUnknown {
				return nil, brokerPark(c, w, b.Contract.RetryMode, scope, effectID, touba.ErrorMessage(err))
			}
		}
		return d.refused(err, log)
	}
	crashpoint.Hit(CrashAfterPrepared)
	req.Context.Effect = &handler.Effect{Scope: scope, EffectID: effectID, Fingerprint: p.Fingerprint,
		RetryMode: b.Contract.RetryMode, Attempt: eff.Attempts}
	// What an HTTP kind sends, for the journal's dispatched event. Asked
	// after Prepare, so that an effect already applied is read back even
	// when its binding's request could not be built now; an input it
	// cannot be built from (a URL placeholder that is an object) is the
	// runner's refusal, unsent: not_applied, StepInputUnresolved.
	// Only the separate dispatched event records it.
	var request string
	if dr, ok := b.Runner.(handler.Describer); ok && !merged {
		request, _ = dr.Describe(req)
	}
	res := d.call(ctx, secrets, b, req, func() error {
		if !merged {
			if err := d.dispatch(context.WithoutCancel(ctx), scope, effectID, callID, request); err != nil {
				return err
			}
		}
		crashpoint.Hit(CrashAfterDispatched)
		return nil
	})
	answered()
	crashpoint.Hit(CrashAfterAnswer)
	return d.effectEnd(ctx, b, scope, effectID, callID, res, log)
}

// requestDispatcher is the journal's Dispatch that records the request a
// call sends in its dispatched event (both backends have it).
type requestDispatcher interface {
	DispatchRequest(ctx context.Context, scope, effectID, callID, request string) error
}

// dispatch journals dispatched, with the request when the journal keeps it.
func (d *Dispatcher) dispatch(ctx context.Context, scope, effectID, callID, request string) error {
	if rd, ok := d.journal.(requestDispatcher); ok && request != "" {
		return rd.DispatchRequest(ctx, scope, effectID, callID, request)
	}
	return d.journal.Dispatch(ctx, scope, effectID, callID)
}

// prepareDispatcher is the journal's optional Prepare-and-Dispatch in one
// commit, for in-process handlers (sqlite/journal.PrepareDispatched). A
// journal without it gets the two commits.
type prepareDispatcher interface {
	PrepareDispatched(ctx context.Context, p touba.EffectPrepare) (*touba.Effect, error)
}

// finish journals an outcome, retrying a failed commit a few times: the
// call happened, and an outcome left unwritten blocks its identity until
// the next start turns it unknown.
func (d *Dispatcher) finish(ctx context.Context, o touba.EffectOutcome, log *callLog) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 50*time.Millisecond, time.Second, 5*time.Second
	return backoff.Retry(func() error {
		err := d.journal.Finish(context.WithoutCancel(ctx), o)
		switch code := touba.ErrorCode(err); {
		case err == nil:
			return nil
		case code == touba.ESecretValueRefused, errors.Is(err, touba.ErrTransition), code == touba.EEffectInProgress,
			code == touba.ELeaseLost:
			return backoff.Permanent(err)
		}
		log.get().Warn().Err(err).Msg("journal outcome write failed; retrying")
		return err
	}, bo)
}

// refused turns a Prepare refusal into the §5 table's answer.
func (d *Dispatcher) refused(err error, log *callLog) (json.RawMessage, *verdict) {
	var re *touba.RefusedError
	if errors.As(err, &re) && errors.Is(err, touba.ErrEffectApplied) {
		if len(re.Effect.Result) == 0 || !jsonx.Valid(re.Effect.Result) {
			return nil, stop(park, touba.EEffectResultUnavailable, "effect %s is applied and its result cannot be restored", re.Effect.EffectID)
		}
		log.get().Debug().Msg("effect already applied; result read from the journal")
		return re.Effect.Result, nil
	}
	te := asTouba(err)
	switch te.Code {
	case touba.EEffectInProgress:
		return nil, &verdict{action: later, code: te.Code, message: te.Message}
	case touba.EEffectRequestConflict, touba.ESecretValueRefused:
		return nil, &verdict{action: fail, code: te.Code, message: te.Message}
	case touba.EEffectReconciliationRequired, touba.EEffectOutcomeUnknown:
		return nil, &verdict{action: park, code: te.Code, message: te.Message}
	}
	log.get().Error().Err(err).Msg("journal refused to prepare")
	return nil, &verdict{action: later, code: te.Code, message: te.Message}
}

func (d *Dispatcher) call(ctx context.Context, secrets *secret.Set, b *Binding, req *handler.Request, dispatched func() error) *handler.Result {
	start := time.Now()
	ctx, span := d.opts.Tracing.StartCall(ctx, callSpan(b, req))
	req.Context.TraceParent = tracing.TraceParent(ctx)
	res := b.Runner.Call(ctx, req, dispatched)
	passOf(ctx).done(res)
	withholdSecretError(secrets, res)
	outcome := res.Outcome
	if outcome == "" {
		outcome = "ok"
		if !res.OK {
			outcome = "error"
		}
	}
	if d.opts.Observe != nil {
		d.opts.Observe(b.Ref, outcome, time.Since(start))
	}
	endCallSpan(span, outcome, res)
	return res
}

func asTouba(err error) *touba.Error {
	var te *touba.Error
	if errors.As(err, &te) {
		return te
	}
	return &touba.Error{Code: touba.EINTERNAL, Message: err.Error()}
}

// withholdSecretError filters a handler's error, which is logged, stored
// (queue entry, run history) and shown to operators: one holding a secret
// value keeps its code only, or becomes SecretValueRefused when the code
// holds it (SPEC §5).
func withholdSecretError(secrets *secret.Set, res *handler.Result) {
	if e := res.Err; e != nil && (secrets.Contains(e.Code) || secrets.Contains(e.Message)) {
		code := e.Code
		if secrets.Contains(code) {
			code = touba.ESecretValueRefused
		}
		res.Err = touba.Errorf(code, "the handler's error message held a secret value; withheld")
	}
}

// callLog is a run's logger with a call's fields (step, call_id, and
// effect_id once set), made the first time the call writes a line: most
// calls write none, and each With copied the run's fields into a new
// buffer (a third of a run's allocations).
type callLog struct {
	run          zerolog.Logger
	step, callID string
	effectID     string
	l            *zerolog.Logger
}

func (c *callLog) get() *zerolog.Logger {
	if c.l == nil {
		lc := c.run.With().Str("step", c.step).Str("call_id", c.callID)
		if c.effectID != "" {
			lc = lc.Str("effect_id", c.effectID)
		}
		l := lc.Logger()
		c.l = &l
	}
	return c.l
}
