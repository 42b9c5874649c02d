// Package worker serves the worker handler kind (SPEC §4.3): a binding
// whose calls are taken by workers that connect out to the daemon. The
// Hub keeps, per binding, the calls waiting for a worker and those handed
// out; a Runner is the binding's handler.Runner, whose Call waits in the
// Hub until a worker takes it and answers, or it times out; Wire is the
// HTTP side (/workers/v1/take, /workers/v1/answer) on the daemon's
// listener.
//
// Only calls of runs the dispatcher leased wait here, and only while a
// worker has room for them: a run whose binding has no worker with room
// is handed back to the queue before its call (a hold, SPEC §2.2), so the
// calls in the Hub are few and each holds its run's lease, as any
// handler call does.
package worker

import (
	"slices"
	"sync"
	"time"

	"github.com/touba/touba-trigger/handler"
)

// connectedFor is how long a worker counts as connected after its last
// take ended (SPEC §4.3).
const connectedFor = 60 * time.Second

// Hub is the calls of every worker binding, by tool ref. One Hub lives as
// long as the daemon: a reload's new runners use the same queues, so
// calls in flight across a SIGHUP are answered.
type Hub struct {
	now func() time.Time
	// gatherFor is gatherFor (tests set it).
	gatherFor time.Duration
	// Room is called when a take opens with room: the dispatcher then
	// leases the runs held on its bindings. Set before the first take.
	Room func()

	mu       sync.Mutex
	bindings map[string]*queue
	held     map[string]*call // handed out, by call_id
	closed   bool
	stop     chan struct{}
}

// queue is one binding's calls and open takes.
type queue struct {
	ref     string
	waiting []*call // oldest entry first (queue ids are UUIDv7: by acceptance)
	wake    chan struct{}
	// takes and room are the open takes of the binding and the calls
	// they may still take; lastTake is when one last ended.
	takes    int
	room     int
	lastTake time.Time
	reserved map[string]bool // entries leased for a take's room, not yet at their call
	inFlight int

	handedOut, timedOut uint64
}

// NewHub returns an empty Hub; now is its clock (time.Now when nil).
func NewHub(now func() time.Time) *Hub {
	if now == nil {
		now = time.Now
	}
	return &Hub{now: now, gatherFor: gatherFor, bindings: map[string]*queue{}, held: map[string]*call{}, stop: make(chan struct{})}
}

// Close ends every open take (answered with what it has) and refuses
// calls from now on; calls in flight end when their runner's context or
// timeout ends them.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.stop)
	}
}

// q returns ref's queue, creating it; h.mu held.
func (h *Hub) q(ref string) *queue {
	q := h.bindings[ref]
	if q == nil {
		q = &queue{ref: ref, wake: make(chan struct{}), reserved: map[string]bool{}}
		h.bindings[ref] = q
	}
	return q
}

// Free is how many more calls of ref the open takes could take now, less
// the calls waiting and the runs leased for that room: what the
// dispatcher may lease for ref without a run waiting in vain.
func (h *Hub) Free(ref string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.bindings[ref]
	if q == nil {
		return 0
	}
	return max(q.room-len(q.waiting)-len(q.reserved), 0)
}

// Reserve counts (on) or uncounts the run of entry queueID, leased for
// ref's room and not yet at its call; its call, once queued, takes the
// count over.
func (h *Hub) Reserve(ref, queueID string, on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.q(ref)
	if on {
		q.reserved[queueID] = true
	} else {
		delete(q.reserved, queueID)
	}
}

// enqueue adds c to its binding's waiting calls, in acceptance order, and
// wakes the binding's open takes; false when the Hub is closed.
func (h *Hub) enqueue(c *call) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	q := h.q(c.ref)
	delete(q.reserved, c.order)
	h.insertWaiting(q, c)
	return true
}

// insertWaiting puts c among q's waiting calls in acceptance order and
// wakes q's open takes; h.mu held.
func (h *Hub) insertWaiting(q *queue, c *call) {
	c.state = stateWaiting
	i, _ := slices.BinarySearchFunc(q.waiting, c, func(a, b *call) int {
		switch {
		case a.order < b.order:
			return -1
		case a.order > b.order:
			return 1
		}
		return 0
	})
	// Equal orders (two steps of one entry cannot wait at once, but a
	// compensation may) keep arrival order.
	for i < len(q.waiting) && q.waiting[i].order == c.order {
		i++
	}
	q.waiting = slices.Insert(q.waiting, i, c)
	if q.takes > 0 {
		close(q.wake)
		q.wake = make(chan struct{})
	}
}

// withdraw takes c out of the waiting calls; false when a take has it
// already.
func (h *Hub) withdraw(c *call) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.bindings[c.ref]
	if q == nil {
		return false
	}
	if i := slices.Index(q.waiting, c); i >= 0 {
		q.waiting = slices.Delete(q.waiting, i, i+1)
		c.state = stateEnded
		return true
	}
	return false
}

// end removes a handed-out call and gives it res, unless it ended
// already (answered, timed out, abandoned): the first end wins.
func (h *Hub) end(c *call, res *handler.Result, timedOut bool) bool {
	h.mu.Lock()
	if h.held[c.id] != c {
		h.mu.Unlock()
		return false
	}
	delete(h.held, c.id)
	c.state = stateEnded
	q := h.bindings[c.ref]
	q.inFlight--
	if timedOut {
		q.timedOut++
	}
	h.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.done <- res
	return true
}

// Stats is one worker binding's state, for metrics, the console and
// `triggers ls` (SPEC §4.3).
type Stats struct {
	// Connected is how many takes are open, and Seen whether a worker was
	// connected within the last 60 s (a take open, or ended since).
	Connected int  `json:"connected"`
	Seen      bool `json:"seen"`
	// Waiting are the calls leased and waiting for a take; the runs held
	// back for want of a worker are the dispatcher's to count.
	Waiting  int `json:"waiting"`
	InFlight int `json:"in_flight"`
	// HandedOut and TimedOut count since start.
	HandedOut uint64 `json:"handed_out"`
	TimedOut  uint64 `json:"timed_out"`
}

// Stats returns the state of every binding the Hub has seen, by tool ref.
func (h *Hub) Stats() map[string]Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	out := make(map[string]Stats, len(h.bindings))
	for ref, q := range h.bindings {
		out[ref] = Stats{Connected: q.takes, Seen: q.takes > 0 || !q.lastTake.IsZero() && now.Sub(q.lastTake) < connectedFor,
			Waiting: len(q.waiting), InFlight: q.inFlight, HandedOut: q.handedOut, TimedOut: q.timedOut}
	}
	return out
}
