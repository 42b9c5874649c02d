package worker

import (
	"context"
	"sync/atomic"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
)

// handGrace is how long a call may wait in the Hub for a take. A run is
// leased for a worker's room only while a take is open, so a call waits
// only when that take ended first (it answered with fewer calls than its
// max, or its worker went away); a worker that is still there takes again
// within moments. Past handGrace no worker is: the call ends unsent with
// WorkerUnavailable and the run is handed back to wait, holding nothing.
const handGrace = 5 * time.Second

// Spec is one worker binding.
type Spec struct {
	Ref string
	// Token is the binding's token (a resolved secret: never logged).
	Token      string
	Timeout    time.Duration
	MaxPayload int64
}

// Runner is a worker binding's handler.Runner: a call waits in the Hub
// until a worker takes it, then until the worker answers or Timeout
// passes.
type Runner struct {
	hub    *Hub
	spec   Spec
	closed atomic.Bool
}

// NewRunner returns the runner of spec over hub. A nil hub (the CLI with
// no daemon running) refuses every call unsent: no worker can reach it.
func NewRunner(hub *Hub, spec Spec) *Runner {
	if spec.MaxPayload <= 0 {
		spec.MaxPayload = handler.DefaultMaxPayload
	}
	return &Runner{hub: hub, spec: spec}
}

// Ref is the binding's tool ref.
func (r *Runner) Ref() string { return r.spec.Ref }

// Token is the binding's token.
func (r *Runner) Token() string { return r.spec.Token }

// MaxPayload is the binding's max_payload_bytes.
func (r *Runner) MaxPayload() int64 { return r.spec.MaxPayload }

// Free is how many more of the binding's calls the open takes could take
// now (Hub.Free): the dispatcher leases no more runs for the binding.
func (r *Runner) Free() int {
	if r.hub == nil {
		return 0
	}
	return r.hub.Free(r.spec.Ref)
}

// Reserve counts the run of queueID leased for the binding's room
// (Hub.Reserve).
func (r *Runner) Reserve(queueID string) {
	if r.hub != nil {
		r.hub.Reserve(r.spec.Ref, queueID, true)
	}
}

// Unreserve ends Reserve's count unless the run's call took it over.
func (r *Runner) Unreserve(queueID string) {
	if r.hub != nil {
		r.hub.Reserve(r.spec.Ref, queueID, false)
	}
}

// Close refuses later calls; calls in flight go on in the Hub.
func (r *Runner) Close() error {
	r.closed.Store(true)
	return nil
}

// Call hands req to a worker and waits for its answer (SPEC §4.3).
// dispatched is the journal's hook, run by the take that hands the call
// out before it encodes the request (so the hook may still set the
// request's effect: a worker binding's prepare is made there) and before
// the worker reads it; a hook that fails ends the call unsent.
func (r *Runner) Call(ctx context.Context, req *handler.Request, dispatched func() error) *handler.Result {
	if r.hub == nil || r.closed.Load() {
		return handler.Failed(req, touba.EffectNotApplied, false, touba.Errorf(touba.EWorkerUnavailable,
			"no worker can take calls of %s here", r.spec.Ref))
	}
	if r.spec.MaxPayload > 0 && int64(len(req.Input)) > r.spec.MaxPayload {
		// Its request holds the input whole: over the bound whatever the
		// take adds, so refused before any take journals it (a crash
		// between that journal write and the refusal would read unknown).
		return handler.Failed(req, touba.EffectNotApplied, false, touba.Errorf(touba.EHandlerPayloadTooLarge,
			"input of %d bytes over max_payload_bytes %d; never handed to a worker", len(req.Input), r.spec.MaxPayload))
	}
	c := &call{ref: r.spec.Ref, id: req.Context.CallID, order: req.Context.QueueID, req: req, timeout: r.spec.Timeout,
		maxPayload: r.spec.MaxPayload, dispatched: dispatched, done: make(chan *handler.Result, 1)}
	if c.timeout <= 0 {
		c.timeout = 30 * time.Second // manifest.DefaultTimeoutMS; a binding always sets one
	}
	if !r.hub.enqueue(c) {
		return handler.Failed(req, touba.EffectNotApplied, false, touba.Errorf(touba.EWorkerUnavailable,
			"the daemon is stopping; the call of %s was not handed out", r.spec.Ref))
	}
	grace := time.NewTimer(handGrace)
	defer grace.Stop()
	done := ctx.Done()
	for {
		select {
		case res := <-c.done:
			return res
		case <-grace.C:
			if r.hub.withdraw(c) {
				return handler.Failed(req, touba.EffectNotApplied, false, touba.Errorf(touba.EWorkerUnavailable,
					"no worker took the call of %s within %s", r.spec.Ref, handGrace))
			}
		case <-done:
			done = nil
			if r.hub.abandon(c, context.Cause(ctx)) {
				return handler.Failed(req, touba.EffectNotApplied, false, touba.Errorf(touba.EWorkerUnavailable,
					"call cancelled before a worker took it (%v)", context.Cause(ctx)))
			}
		}
	}
}
