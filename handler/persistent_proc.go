package handler

import (
	"io"
	"strings"
	"sync"
	"time"

	touba "github.com/touba/touba-trigger"
)

// exitGrace bounds how long a process whose stdin is closed and whose
// calls are all answered may take to exit before its group is killed.
const exitGrace = 5 * time.Second

// pcall is one call written (or being written) to a persistent process.
type pcall struct {
	req     *Request
	done    chan *Result // buffered; receives exactly one Result
	started bool         // its request line began to be written (guarded by proc.mu)
}

// proc is one persistent handler process. A request is reserved on it
// (take), registered and written (register, write), and answered by the reader (deliver), or
// failed when the process ends (supervise). The process ends when the host
// kills its group (a timeout, a cancellation, a protocol error, an output
// line too large), when it exits by itself, or after its stdin was closed
// (max_calls, idle, Close) and it has answered everything.
type proc struct {
	r   *persistentRunner
	c   *child
	pid int
	wmu sync.Mutex // one request line on stdin at a time

	mu          sync.Mutex
	pending     map[string]*pcall // call id → call whose request was written or is being written
	sent        int               // requests reserved here, max_calls counts these
	unsent      int               // reserved, not yet written nor given up
	answered    int
	retiring    bool         // takes no more requests
	stdinClosed bool         // the process was told there are no more
	exited      bool         // it exited (its group may still be signalled)
	reaped      bool         // its pid may be reused: never signal it again
	overstayed  bool         // killed after exitGrace
	failErr     *touba.Error // why the host ended it; the calls in flight end with it
	idleGen     int
	idle        *time.Timer
	grace       *time.Timer

	readDone   chan struct{}
	stderr     *tail
	stderrDone chan struct{}
}

// start starts a new handler process and the goroutines that read its
// stdout and stderr and watch for its end.
func (r *persistentRunner) start() (*proc, error) {
	c, err := startChild(r.spec.Command, r.spec.Args, r.spec.Dir, r.env, r.isolate)
	if err != nil {
		return nil, err
	}
	p := &proc{r: r, c: c, pid: c.cmd.Process.Pid, pending: map[string]*pcall{},
		readDone: make(chan struct{}), stderr: &tail{limit: stderrLimit}, stderrDone: make(chan struct{})}
	r.procs.Add(1)
	go p.readLoop()
	go func() {
		defer close(p.stderrDone)
		_, _ = io.Copy(p.stderr, c.stderr)
	}()
	go p.supervise()
	r.log.Debug().Int("pid", p.pid).Msg("handler process started")
	return p, nil
}

// take reserves one request on p, unless p takes no more.
func (p *proc) take(maxCalls int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.retiring || p.exited || p.failErr != nil {
		return false
	}
	p.sent++
	p.unsent++
	p.idleGen++
	if p.idle != nil {
		p.idle.Stop()
		p.idle = nil
	}
	if p.sent >= maxCalls {
		p.retiring = true
	}
	return true
}

// draining reports whether p takes no more requests.
func (p *proc) draining() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.retiring
}

// unreserve gives up a reservation whose request will not be written.
func (p *proc) unreserve() {
	p.mu.Lock()
	p.unsent--
	p.settleLocked()
	p.mu.Unlock()
}

// register puts c in flight on p, before its request is written, so that
// its timeout can end p even while the write is blocked. An error means
// the request will not be written.
func (p *proc) register(c *pcall) *touba.Error {
	id := c.req.Context.CallID
	p.mu.Lock()
	defer p.mu.Unlock()
	var refused *touba.Error
	if p.exited || p.failErr != nil {
		refused = touba.Errorf(touba.EHandlerFailed, "handler process %d ended before the request was sent", p.pid)
	} else if _, dup := p.pending[id]; dup {
		refused = touba.Errorf(touba.EINTERNAL, "call_id %s is already in flight", id)
	}
	if refused != nil {
		p.unsent--
		p.settleLocked()
		return refused
	}
	p.pending[id] = c
	return nil
}

// write writes the request line of a registered call. Whatever happens,
// the call's Result then comes to c.done.
func (p *proc) write(c *pcall, body []byte) {
	p.wmu.Lock()
	// A process that already ended gets nothing more: the call was never
	// sent, and its reaper answers it not_applied rather than unknown.
	p.mu.Lock()
	ended := p.exited || p.failErr != nil
	c.started = !ended
	p.mu.Unlock()
	var err error
	if !ended {
		_, err = p.c.stdin.Write(body)
	}
	p.wmu.Unlock()

	p.mu.Lock()
	p.unsent--
	if err != nil {
		// Maybe partly written: the call is in flight, and the process ends.
		p.failLocked(touba.Errorf(touba.EHandlerFailed, "write request to handler process %d: %v", p.pid, err))
	}
	p.settleLocked()
	p.mu.Unlock()
	if err != nil {
		p.r.forget(p)
	}
}

// expire ends p because c, still in flight, ran out of time.
func (p *proc) expire(c *pcall, err *touba.Error) {
	p.mu.Lock()
	inFlight := p.pending[c.req.Context.CallID] == c
	if inFlight {
		p.failLocked(err)
	}
	p.mu.Unlock()
	if inFlight {
		p.r.forget(p)
	}
}

// failLocked records why p ends (the first cause wins) and kills its group.
func (p *proc) failLocked(err *touba.Error) {
	if p.failErr == nil {
		p.failErr = err
	}
	p.killLocked()
}

// killLocked kills p's process group, unless p was reaped and its pid
// may belong to someone else now.
func (p *proc) killLocked() {
	if !p.reaped {
		p.c.kill()
	}
}

// retire closes p's stdin once the requests reserved on it are written.
func (p *proc) retire() {
	p.mu.Lock()
	p.retiring = true
	p.settleLocked()
	p.mu.Unlock()
}

// settleLocked acts on p having nothing left to write or to await: a
// retiring process has its stdin closed and, once idle, a deadline to
// exit; a serving one starts its idle timer.
func (p *proc) settleLocked() {
	if p.exited || p.failErr != nil || p.unsent > 0 {
		return
	}
	if p.retiring {
		if !p.stdinClosed {
			p.stdinClosed = true
			p.c.stdin.Close()
		}
		if len(p.pending) == 0 && p.grace == nil {
			p.grace = time.AfterFunc(exitGrace, p.overstay)
		}
		return
	}
	if len(p.pending) == 0 && p.idle == nil {
		gen := p.idleGen
		p.idle = time.AfterFunc(p.r.opts.IdleTimeout, func() { p.idleFor(gen) })
	}
}

// idleFor retires p if no call came since its idle timer of gen started.
func (p *proc) idleFor(gen int) {
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen != p.idleGen || p.retiring || p.exited || p.failErr != nil || p.unsent > 0 || len(p.pending) > 0 {
		return
	}
	if p.r.cur == p {
		p.r.cur = nil
	}
	p.r.log.Debug().Int("pid", p.pid).Msg("handler process idle; stdin closed")
	p.retiring = true
	p.settleLocked()
}

// overstay kills a retired process that did not exit in time.
func (p *proc) overstay() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exited {
		p.overstayed = true
		p.killLocked()
	}
}

// ends the calls it left unanswered, and logs its end with its stderr.
func (p *proc) supervise() {
	defer p.r.procs.Done()
	<-p.c.exited
	p.mu.Lock()
	p.exited = true
	p.killLocked() // what it left behind in its group
	p.mu.Unlock()
	p.r.forget(p)
	select {
	case <-p.readDone:
	case <-time.After(ioGrace):
		p.c.stdout.Close() // held open by a process that left the group
		<-p.readDone
	}
	p.mu.Lock()
	p.reaped = true
	for _, t := range []*time.Timer{p.idle, p.grace} {
		if t != nil {
			t.Stop()
		}
	}
	pending, cause := p.pending, p.failErr
	started := make(map[*pcall]bool, len(pending))
	for _, c := range pending {
		started[c] = c.started
	}
	p.pending = map[string]*pcall{}
	sent, answered, closed, overstayed := p.sent, p.answered, p.stdinClosed, p.overstayed
	p.mu.Unlock()
	state := p.c.reap()
	status := "an unknown status"
	if state != nil {
		status = state.String()
	}
	if cause == nil && len(pending) > 0 {
		cause = crashError(p.pid, status, len(pending))
	}
	for _, c := range pending {
		if !started[c] {
			c.done <- fail(c.req, touba.EffectNotApplied, true, touba.Errorf(cause.Code,
				"%s; this call's request was never written", cause.Message))
			continue
		}
		c.done <- fail(c.req, touba.EffectUnknown, true, cause)
	}
	select {
	case <-p.stderrDone:
	case <-time.After(ioGrace):
		p.c.stderr.Close()
		<-p.stderrDone
	}
	p.c.close()

	ev := p.r.log.Debug()
	switch {
	case cause != nil:
		ev = p.r.log.Warn().Str("code", cause.Code).Str("reason", cause.Message)
	case overstayed:
		ev = p.r.log.Warn().Str("reason", "did not exit within "+exitGrace.String()+" of its stdin closing; killed")
	case !closed:
		ev = p.r.log.Warn().Str("reason", "exited while its stdin was open")
	}
	ev.Int("pid", p.pid).Int("calls", sent).Int("answered", answered).Int("unanswered", len(pending)).
		Str("status", status).Str("stderr", strings.TrimSpace(p.r.redact(p.stderr.String()))).
		Msg("handler process ended")
}
