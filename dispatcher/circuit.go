package dispatcher

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
)

// A binding's circuit (SPEC §2.2 circuit) is the third thing, with the
// trigger's pause (held by the store's lease) and max_concurrency (slots.go),
// that can hold a run back; it holds the run in the same place as a
// max_concurrency slot (acquire), before anything of the step is written, so
// the wait spends no attempt and the lease is renewed meanwhile.
//
// Closed, each ended call is counted in a sliding window of window_ms (in
// buckets); once min_calls calls ended in it and at least failure_ratio of
// them failed (timeout, 5xx, connection lost: HandlerFailed or
// HandlerTimeout), the circuit opens: calls wait for open_ms, then exactly
// one call probes. Its success closes the circuit; its failure opens it
// again for open_ms.
//
// With Options.Circuits set (the queue file on SQLite, the database on
// PostgreSQL), the open, probing and closed states are stored: they
// outlive a restart, and on PostgreSQL they are the cluster's. Each node
// counts its own calls (no write per call) and writes only transitions;
// it reads the stored state of a circuit-bound binding at most once per
// poll interval.

// CircuitConfig is a binding's circuit; zero MinCalls is none.
type CircuitConfig struct {
	FailureRatio float64
	MinCalls     int
	Window       time.Duration
	Open         time.Duration
}

// circuitBuckets is how many buckets one window is counted in.
const circuitBuckets = 20

type bucket struct {
	start          time.Time
	calls, failing int
}

// circuit is one binding's breaker in this process.
type circuit struct {
	mu       sync.Mutex
	cfg      CircuitConfig
	state    touba.CircuitState
	probe    bool      // this process holds the probe
	buckets  []bucket  // ring of the window
	read     time.Time // when the shared state was last read
	changed  chan struct{}
	sharedOK bool // the shared state has been read once
	// reserved are runs leased for its due probe, not yet at their call.
	reserved atomic.Int64
}

// circuits is the breakers of the bindings, by tool ref, kept across
// reloads like the slots.
type circuits struct {
	mu sync.Mutex
	by map[string]*circuit
}

func (cs *circuits) of(b *Binding) *circuit {
	if b.Circuit.MinCalls <= 0 {
		return nil
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.by == nil {
		cs.by = map[string]*circuit{}
	}
	if c, ok := cs.by[b.Ref]; ok {
		c.mu.Lock()
		c.cfg = b.Circuit
		c.mu.Unlock()
		return c
	}
	c := &circuit{cfg: b.Circuit, state: touba.CircuitState{ToolRef: b.Ref, State: touba.CircuitClosed},
		buckets: make([]bucket, circuitBuckets), changed: make(chan struct{})}
	cs.by[b.Ref] = c
	return c
}

// notify wakes the runs waiting on c; c.mu held.
func (c *circuit) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// failed tells whether a call's result counts as a failure of the remote.
func failed(res *handler.Result) bool {
	if res.Err == nil {
		return false
	}
	return res.Err.Code == touba.EHandlerFailed || res.Err.Code == touba.EHandlerTimeout
}

// circuitPass is a run's pass through a circuit: done records the call's
// outcome; a pass given back unused (the run stopped before calling) frees
// a probe for another run.
type circuitPass struct {
	d     *Dispatcher
	c     *circuit
	probe bool
	used  bool
}

func (p *circuitPass) done(res *handler.Result) {
	if p == nil {
		return
	}
	p.used = true
	p.d.recordCall(p.c, p.probe, failed(res))
}

func (p *circuitPass) release() {
	if p == nil || p.used || !p.probe {
		return
	}
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.probe {
		c.probe = false
		c.state.State, c.state.Until = touba.CircuitOpen, p.d.opts.Now()
		if p.d.opts.Circuits != nil {
			p.d.sharedWrite(func(ctx context.Context) error { return p.d.opts.Circuits.OpenCircuit(ctx, c.state) })
		}
		c.notify()
	}
}

// passCircuit waits until b's circuit lets a call through: closed, or
// open past open_ms with nobody probing (this call is the probe). It ends
// early, ok false, when ctx ends or the dispatcher stops leasing.
func (d *Dispatcher) passCircuit(ctx context.Context, b *Binding, waiting *bool) (*circuitPass, bool) {
	c := d.circuits.of(b)
	if c == nil {
		return nil, true
	}
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		d.refreshShared(ctx, c)
		c.mu.Lock()
		if p, ok := d.enterCircuit(ctx, b, c); ok {
			c.mu.Unlock()
			return p, true
		}
		now := d.opts.Now()
		ch := c.changed
		wait := d.opts.PollInterval
		if c.state.State == touba.CircuitOpen {
			wait = min(wait, max(c.state.Until.Sub(now), time.Millisecond))
		}
		c.mu.Unlock()
		if !*waiting {
			*waiting = true
			d.waiting.Add(1)
		}
		t.Reset(wait)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			return nil, false
		case <-d.stop:
			return nil, false
		}
	}
}

// enterCircuit lets a call through c if it may go now: closed, or open
// past open_ms with nobody probing (this call is the probe); c.mu held.
func (d *Dispatcher) enterCircuit(ctx context.Context, b *Binding, c *circuit) (*circuitPass, bool) {
	now := d.opts.Now()
	st := c.state.State
	if st == touba.CircuitClosed {
		return &circuitPass{d: d, c: c}, true
	}
	// A probe claimed by a node that died (probing for longer than any
	// call lasts) is claimed again.
	orphan := st == touba.CircuitProbing && !c.probe && d.opts.Circuits != nil && now.Sub(c.state.Since) > probeStale(c.cfg)
	if (st == touba.CircuitOpen && !now.Before(c.state.Until) || orphan) && d.claimProbe(ctx, c, now) {
		c.probe = true
		c.state.State, c.state.Since = touba.CircuitProbing, now
		d.log.Info().Str("event", "circuit.probing").Str("tool_ref", b.Ref).Msg("circuit open_ms passed; one call probes")
		d.circuitChanged(b.Ref, st, touba.CircuitProbing)
		return &circuitPass{d: d, c: c, probe: true}, true
	}
	return nil, false
}

// claimProbe takes the probe of c: in this process, it is free whenever
// the state is open (a probe in flight makes it probing); across nodes,
// the store gives it to one of them. c.mu held.
func (d *Dispatcher) claimProbe(ctx context.Context, c *circuit, now time.Time) bool {
	if d.opts.Circuits == nil {
		return true
	}
	ok, err := d.opts.Circuits.ClaimProbe(ctx, c.state.ToolRef, now, probeStale(c.cfg))
	if err != nil {
		d.log.Warn().Err(err).Str("tool_ref", c.state.ToolRef).Msg("cannot claim a circuit probe; retrying")
		return false
	}
	if !ok {
		c.read = time.Time{} // another node probes: read its verdict
	}
	return ok
}

// probeStale is how long a probe may go on before another node takes it
// over: a probe is one call, far shorter.
func probeStale(c CircuitConfig) time.Duration { return 2*c.Open + time.Minute }

type passKey struct{}

// withPass carries a run's circuit pass to the call that uses it. A pass
// through a closed circuit also gates the call's further tries: once the
// circuit opens, a call in flight sends no more (SPEC §2.2); the probe's
// tries are its own.
//
// Each try that failed on the host's side and is tried again counts in
// the window at once, as a failed call would (handler.WithFailedTry): the
// circuit counts tries, not only calls. With calls of six tries each,
// counting only ended calls let about 1,250 tries reach a failing remote
// before the circuit could open (issue 43).
func withPass(ctx context.Context, p *circuitPass) context.Context {
	if p == nil {
		return ctx
	}
	if !p.probe {
		c := p.c
		ctx = handler.WithFailedTry(ctx, func() { p.d.recordCall(c, false, true) })
		ctx = handler.WithTryGate(ctx, func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.state.State == touba.CircuitClosed
		})
	}
	return context.WithValue(ctx, passKey{}, p)
}

func passOf(ctx context.Context) *circuitPass {
	p, _ := ctx.Value(passKey{}).(*circuitPass)
	return p
}

// refreshShared reads the cluster's state of c when it is older than a
// poll interval.
func (d *Dispatcher) refreshShared(ctx context.Context, c *circuit) {
	if d.opts.Circuits == nil {
		return
	}
	c.mu.Lock()
	fresh := c.sharedOK && time.Since(c.read) < d.opts.PollInterval
	ref := c.state.ToolRef
	c.mu.Unlock()
	if fresh {
		return
	}
	s, err := d.opts.Circuits.Circuit(ctx, ref)
	if err != nil {
		d.log.Warn().Err(err).Str("tool_ref", ref).Msg("cannot read the circuit's shared state; using this node's")
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.read, c.sharedOK = time.Now(), true
	if c.probe || s.State == c.state.State && s.Until.Equal(c.state.Until) {
		return
	}
	from := c.state.State
	c.state = s
	if s.State == touba.CircuitClosed {
		c.reset()
	}
	if from != s.State {
		d.log.Info().Str("event", "circuit."+s.State).Str("tool_ref", ref).Str("from", from).Msg("circuit changed on another node")
		d.circuitChanged(ref, from, s.State)
	}
	c.notify()
}

// reset empties the window; c.mu held.
func (c *circuit) reset() {
	for i := range c.buckets {
		c.buckets[i] = bucket{}
	}
}

// recordCall counts one ended call (or one failed try of a call going
// on, withPass) of c and moves its state.
func (d *Dispatcher) recordCall(c *circuit, probe, fail bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := d.opts.Now()
	ref := c.state.ToolRef
	if probe && c.probe {
		c.probe = false
		if fail {
			d.open(c, now, 1, 1, touba.CircuitProbing)
			return
		}
		c.state = touba.CircuitState{ToolRef: ref, State: touba.CircuitClosed, Since: now}
		c.reset()
		if d.opts.Circuits != nil {
			d.sharedWrite(func(ctx context.Context) error { return d.opts.Circuits.CloseCircuit(ctx, ref, now) })
		}
		d.log.Info().Str("event", "circuit.closed").Str("tool_ref", ref).Msg("circuit closed: the probe succeeded")
		d.circuitChanged(ref, touba.CircuitProbing, touba.CircuitClosed)
		c.notify()
		return
	}
	width := max(c.cfg.Window/circuitBuckets, time.Millisecond)
	start := now.Truncate(width)
	i := int(start.UnixMilli()/width.Milliseconds()) % len(c.buckets)
	if !c.buckets[i].start.Equal(start) {
		c.buckets[i] = bucket{start: start}
	}
	c.buckets[i].calls++
	if fail {
		c.buckets[i].failing++
	}
	if c.state.State != touba.CircuitClosed {
		return
	}
	calls, fails := 0, 0
	for _, b := range c.buckets {
		if !b.start.IsZero() && now.Sub(b.start) < c.cfg.Window {
			calls, fails = calls+b.calls, fails+b.failing
		}
	}
	if calls >= c.cfg.MinCalls && float64(fails) >= c.cfg.FailureRatio*float64(calls) {
		d.open(c, now, calls, fails, touba.CircuitClosed)
	}
}

// open opens c for open_ms; c.mu held.
func (d *Dispatcher) open(c *circuit, now time.Time, calls, fails int, from string) {
	c.state = touba.CircuitState{ToolRef: c.state.ToolRef, State: touba.CircuitOpen, Since: now, Until: now.Add(c.cfg.Open),
		Calls: calls, Failures: fails}
	c.reset()
	if d.opts.Circuits != nil {
		s := c.state
		d.sharedWrite(func(ctx context.Context) error { return d.opts.Circuits.OpenCircuit(ctx, s) })
	}
	d.log.Warn().Str("event", "circuit.open").Str("tool_ref", c.state.ToolRef).Str("from", from).Int("calls", calls).
		Int("failures", fails).Dur("open", c.cfg.Open).Msg("circuit open: runs needing the binding wait")
	d.circuitChanged(c.state.ToolRef, from, touba.CircuitOpen)
	c.notify()
}

// sharedWrite writes a transition to the cluster's state, bounded: a
// database that does not answer leaves this node's state in force.
func (d *Dispatcher) sharedWrite(fn func(ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := fn(ctx); err != nil {
		d.log.Warn().Err(err).Msg("cannot write the circuit's shared state; this node's stands")
	}
}

func (d *Dispatcher) circuitChanged(ref, from, to string) {
	if d.opts.OnCircuit != nil {
		d.opts.OnCircuit(ref, from, to)
	}
}

// Circuits returns this process's view of every circuit not closed.
func (d *Dispatcher) Circuits() []touba.CircuitState {
	d.circuits.mu.Lock()
	defer d.circuits.mu.Unlock()
	var out []touba.CircuitState
	for _, c := range d.circuits.by {
		c.mu.Lock()
		if c.state.State != touba.CircuitClosed {
			out = append(out, c.state)
		}
		c.mu.Unlock()
	}
	return out
}
