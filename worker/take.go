package worker

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
)

// A call's life in the Hub, under Hub.mu: waiting for a take, being
// handed out by one (its dispatched event being journaled), held by the
// worker it was handed to, ended. abandoned marks a call whose runner
// gave up while a take was handing it out: the take ends it.
const (
	stateWaiting = iota
	stateHanding
	stateHeld
	stateEnded
)

// call is one handler call of a worker binding.
type call struct {
	ref        string
	id         string // the request's call_id
	order      string // the entry's queue id: acceptance order
	req        *handler.Request
	timeout    time.Duration
	maxPayload int64
	dispatched func() error

	state     int
	abandoned bool
	timer     *time.Timer
	done      chan *handler.Result // buffered: one result, ever
}

// ErrNotHeld is an answer to a call that is not the worker's (any more):
// timed out, answered already, or never handed out.
var ErrNotHeld = errors.New("the call is not held by a worker")

// Take waits up to wait for calls of refs and hands out up to n of them,
// oldest entry first: each is journaled (its runner's hook, all of them at
// once) before Take returns its request, and is then held by the caller
// until it answers or the call's timeout passes. It returns once calls
// wait (at most gatherFor later while runs leased for its room are on
// their way to their call), and empty when wait passes, ctx ends or the
// Hub closes.
func (h *Hub) Take(ctx context.Context, refs []string, n int, wait time.Duration) [][]byte {
	if n <= 0 || len(refs) == 0 {
		return nil
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	qs := make([]*queue, len(refs))
	for i, ref := range refs {
		qs[i] = h.q(ref)
		qs[i].takes++
		qs[i].room += n
	}
	picked := h.pick(qs, n)
	h.mu.Unlock()
	if len(picked) == 0 && h.Room != nil {
		// Runs held back for want of a worker may go now.
		h.Room()
	}
	var timer *time.Timer
	for len(picked) == 0 {
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
		if !h.woken(ctx, qs, timer) {
			break
		}
		h.mu.Lock()
		picked = h.pick(qs, n)
		h.mu.Unlock()
	}
	if len(picked) > 0 && len(picked) < n {
		picked = h.gather(ctx, qs, picked, n)
	}
	if ctx.Err() != nil && len(picked) > 0 {
		// The worker's take ended (it stopped, its connection closed)
		// while the take held calls it had not journaled: they wait again
		// for another take, where handing them out would have made each
		// dispatched to nobody and unknown at its timeout.
		h.putBack(picked)
		picked = nil
	}
	h.mu.Lock()
	now := h.now()
	for _, q := range qs {
		q.takes--
		q.room -= n
		q.lastTake = now
	}
	h.mu.Unlock()
	// Each call's journal write (prepared and dispatched) is its own:
	// made at once, they share one group commit instead of a sync each.
	bodies := make([][]byte, len(picked))
	var wg sync.WaitGroup
	for i, c := range picked {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bodies[i] = h.handOut(c)
		}()
	}
	wg.Wait()
	out := make([][]byte, 0, len(picked))
	for _, body := range bodies {
		if body != nil {
			out = append(out, body)
		}
	}
	return out
}

// woken waits until a call of one of qs is queued (true), or ctx ends,
// timer fires or the Hub stops (false). One channel per binding, closed
// when a call of it is queued: every take of the binding wakes, and the
// first picks it.
func (h *Hub) woken(ctx context.Context, qs []*queue, timer *time.Timer) bool {
	cases := []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(h.stop)},
	}
	h.mu.Lock()
	for _, q := range qs {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(q.wake)})
	}
	h.mu.Unlock()
	i, _, _ := reflect.Select(cases)
	return i >= 3
}

// gatherFor bounds how long a take that holds some calls waits for the
// runs leased for its room that are not yet at their call: a run leased
// reaches its call within moments (no journal write before it), and a
// take of one call costs a journal commit and an HTTP answer of its own
// (docs/performance.md, "Round 12").
const gatherFor = time.Millisecond

// gather adds to picked the calls of runs leased for the take's room that
// reach the Hub within gatherFor, up to n in all: one take, one journal
// commit and one answer carry them, where each would otherwise wait for
// a take of its own.
func (h *Hub) gather(ctx context.Context, qs []*queue, picked []*call, n int) []*call {
	h.mu.Lock()
	// The calls picked are no longer room: nothing more is leased for
	// them meanwhile.
	for _, c := range picked {
		h.bindings[c.ref].room--
	}
	on := reservedIn(qs)
	h.mu.Unlock()
	timer := time.NewTimer(h.gatherFor)
	defer timer.Stop()
	for on && len(picked) < n {
		if !h.woken(ctx, qs, timer) {
			break
		}
		h.mu.Lock()
		more := h.pick(qs, n-len(picked))
		for _, c := range more {
			h.bindings[c.ref].room--
		}
		picked = append(picked, more...)
		on = reservedIn(qs)
		h.mu.Unlock()
	}
	h.mu.Lock()
	for _, c := range picked {
		h.bindings[c.ref].room++
	}
	h.mu.Unlock()
	return picked
}

// reservedIn tells whether runs leased for qs's room are on their way to
// their call; h.mu held.
func reservedIn(qs []*queue) bool {
	for _, q := range qs {
		if len(q.reserved) > 0 {
			return true
		}
	}
	return false
}

// pick moves up to n waiting calls of qs to handing, oldest entry first
// across the bindings; h.mu held.
func (h *Hub) pick(qs []*queue, n int) []*call {
	var out []*call
	for len(out) < n {
		var best *queue
		for _, q := range qs {
			if len(q.waiting) > 0 && (best == nil || q.waiting[0].order < best.waiting[0].order) {
				best = q
			}
		}
		if best == nil {
			break
		}
		c := best.waiting[0]
		best.waiting = best.waiting[1:]
		c.state = stateHanding
		out = append(out, c)
	}
	return out
}

// handOut journals c (its runner's hook: dispatched, or prepared and
// dispatched in one commit, which sets the request's effect and attempt),
// then encodes its request and holds it for the worker: the request, or
// nil when c ended instead (the journal refused, too large, its runner
// gave up meanwhile). A call the journal refused was never handed out;
// one too large is journaled but never sent (not_applied).
func (h *Hub) handOut(c *call) []byte {
	if err := c.dispatched(); err != nil {
		h.finish(c, handler.Failed(c.req, touba.EffectNotApplied, false, handler.HookError(err)))
		return nil
	}
	body, err := handler.EncodeRequest(c.req, h.now().Add(c.timeout))
	if err != nil {
		h.finish(c, handler.Failed(c.req, touba.EffectNotApplied, false, touba.Errorf(touba.EINTERNAL, "%v", err)))
		return nil
	}
	if c.maxPayload > 0 && int64(len(body)) > c.maxPayload {
		h.finish(c, handler.Failed(c.req, touba.EffectNotApplied, false, touba.Errorf(touba.EHandlerPayloadTooLarge,
			"request of %d bytes over max_payload_bytes %d; never handed to a worker", len(body), c.maxPayload)))
		return nil
	}
	h.mu.Lock()
	if c.abandoned {
		h.mu.Unlock()
		h.finish(c, handler.Failed(c.req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerTimeout,
			"call cancelled while it was handed to a worker")))
		return nil
	}
	c.state = stateHeld
	h.held[c.id] = c
	q := h.bindings[c.ref]
	q.inFlight++
	q.handedOut++
	c.timer = time.AfterFunc(c.timeout, func() {
		h.end(c, handler.Failed(c.req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerTimeout,
			"no answer from a worker within %s of handing the call out", c.timeout)), true)
	})
	h.mu.Unlock()
	return body
}

// putBack returns calls a take picked but never journaled to their
// bindings' waiting calls; one its runner gave up on meanwhile ends
// not_applied, never sent.
func (h *Hub) putBack(picked []*call) {
	var gone []*call
	h.mu.Lock()
	for _, c := range picked {
		if c.abandoned {
			gone = append(gone, c)
			continue
		}
		h.insertWaiting(h.q(c.ref), c)
	}
	h.mu.Unlock()
	for _, c := range gone {
		h.finish(c, handler.Failed(c.req, touba.EffectNotApplied, false, touba.Errorf(touba.EHandlerTimeout,
			"call cancelled before a worker took it")))
	}
}

// finish ends a call no worker holds.
func (h *Hub) finish(c *call, res *handler.Result) {
	h.mu.Lock()
	c.state = stateEnded
	h.mu.Unlock()
	c.done <- res
}

// abandon is a runner giving up on c (its context ended): a waiting call
// is withdrawn (true: never handed out), a held one ends as cancelled, and
// one being handed out ends once its take has journaled it.
func (h *Hub) abandon(c *call, why error) (withdrawn bool) {
	h.mu.Lock()
	switch c.state {
	case stateWaiting:
		h.mu.Unlock()
		return h.withdraw(c)
	case stateHanding:
		c.abandoned = true
		h.mu.Unlock()
		return false
	}
	h.mu.Unlock()
	h.end(c, handler.Failed(c.req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerTimeout,
		"call cancelled while a worker held it (%v)", why)), false)
	return false
}

// Answer records a worker's answer to the call callID, read exactly as a
// process handler's (SPEC §4). serves tells whether the worker's token
// serves a binding. ErrNotHeld: the call is not held by a worker of that
// token (timed out, answered already, unknown), and the answer is not
// used.
func (h *Hub) Answer(callID string, serves func(ref string) bool, doc []byte) error {
	h.mu.Lock()
	c := h.held[callID]
	h.mu.Unlock()
	if c == nil || !serves(c.ref) {
		return ErrNotHeld
	}
	res := handler.Interpret(c.req, doc)
	if c.maxPayload > 0 && int64(len(doc)) > c.maxPayload {
		res = handler.Failed(c.req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerPayloadTooLarge,
			"answer over max_payload_bytes %d", c.maxPayload))
	}
	if !h.end(c, res, false) {
		return ErrNotHeld
	}
	return nil
}
