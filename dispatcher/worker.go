package dispatcher

import (
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
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
