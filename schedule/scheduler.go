package schedule

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// catch_up values (SPEC §2.3).
const (
	CatchUpLast = "last"
	CatchUpAll  = "all"
	CatchUpNone = "none"
)

// CrashAfterTick is the crash point (TOUBA_CRASHPOINT, tests only) after
// a tick was enqueued and before the scheduler moved its cursor past it.
const CrashAfterTick = "after-tick"

// Spec is one schedule trigger as the Scheduler runs it.
type Spec struct {
	Ref      string
	Cron     *Cron
	Location *time.Location
	CatchUp  string
}

func (s Spec) same(o Spec) bool {
	return s.Cron.String() == o.Cron.String() && s.Location.String() == o.Location.String()
}

// Enqueuer takes a tick through intake (trigger.Intake is one): status
// enqueued, duplicate or consumed, or an error with a public code.
type Enqueuer interface {
	EnqueueTick(ctx context.Context, ref string, at time.Time) (status, queueID string, err error)
}

// TickStore finds the newest tick a trigger ever enqueued, on any node:
// the queue's LatestTickID, which reads the schedule's cursor (moved in
// each tick's enqueue, never forgotten by --history) as well as the
// entries, so a tick forgotten after it ran is still known (issue 42).
type TickStore interface {
	LatestTickID(ctx context.Context, triggerRef string) (string, error)
}

// Options configure a Scheduler.
type Options struct {
	Enqueue Enqueuer
	Ticks   TickStore
	Clock   Clock // nil: System
	// Retention bounds catch_up "all": ticks older than this are not
	// enqueued (--retention; 0 is DefaultRetention). It bounds as well
	// the ticks owed after the clock jumped forward.
	Retention time.Duration
	// Grace is how old a tick may be at start and still count as on time
	// rather than missed (0: DefaultGrace). A tick that comes due while
	// the daemon runs is on time however late the queue takes it.
	Grace time.Duration
	Log   zerolog.Logger
}

// Defaults of Options.
const (
	DefaultRetention = 168 * time.Hour
	DefaultGrace     = time.Minute
	// maxWait bounds one wait, so a wall clock set forward (NTP, a
	// resumed VM) is noticed within it.
	maxWait = time.Minute
	// retryEvery is how soon a tick the queue did not take is tried
	// again (the database down, the queue full).
	retryEvery = 2 * time.Second
	// perPass bounds what one pass offers from the catch_up "all"
	// backlogs (all of them together) and from one schedule's due ticks,
	// so a week of a per-minute cron never holds up another schedule's
	// tick that comes due meanwhile (SPEC §2.3).
	perPass = 100
)

// Scheduler enqueues the ticks of the program's schedule triggers.
//
// For each schedule it keeps a cursor: every tick up to it was handled.
// At start (New, and SetSpecs for a schedule new to the program) the
// cursor is the newest tick the queue knows of the trigger (TickStore:
// whether or not --history forgot its entry since); ticks after
// it and up to that start were missed and are enqueued per catch_up (a
// tick at most Grace old is on time, not missed). Every tick after the
// start comes due while this daemon runs: each one is enqueued, none is
// ever missed. A schedule the queue holds no tick of starts then: nothing
// before its first start is missed. Enqueueing a tick twice (a restart,
// another node) is harmless: the identity rule answers it duplicate or
// consumed and nothing runs again.
//
// Each pass first enqueues every schedule's due ticks, then at most
// perPass ticks of the catch_up "all" backlogs, the schedules in turn. A
// schedule's own due ticks wait for its backlog: its ticks go to the
// queue oldest first, so a restart resumes from the newest one.
type Scheduler struct {
	opts  Options
	clock Clock

	mu        sync.Mutex
	pending   []Spec    // set by SetSpecs, taken by the loop
	pendingAt time.Time // when SetSpecs was called
	changed   chan struct{}
	// set and applied count the SetSpecs calls made and taken by the loop
	// (under mu), so a reload can tell when it is in force.
	set, applied uint64

	// Owned by the loop: the schedules in the program's order, and the
	// index of the one whose backlog goes first in the next pass.
	states []*state
	turn   int

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

type state struct {
	spec   Spec
	cursor time.Time // every tick at or before it is handled
	known  bool      // cursor read from the queue
	first  time.Time // the cursor it joined with
	// since is when it joined: the cursor when the queue has no tick, and
	// the end of what catch_up is about.
	since    time.Time
	caught   bool      // the ticks up to since are handled per catch_up
	caughtUp int       // missed ticks the catch-up enqueued
	retryAt  time.Time // the queue refused or could not be read: not before
}

// New returns a Scheduler for specs; Start runs it.
func New(specs []Spec, opts Options) *Scheduler {
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	s := &Scheduler{opts: opts, clock: opts.Clock, changed: make(chan struct{}, 1)}
	if s.clock == nil {
		s.clock = System{}
	}
	s.SetSpecs(specs)
	return s
}

// SetSpecs replaces the schedules (reload). A schedule whose cron or time
// zone changed starts afresh from now: no tick of the new expression
// before the reload is enqueued. One new to the program starts as at
// start-up (from its newest tick in the queue, if any).
func (s *Scheduler) SetSpecs(specs []Spec) {
	now := s.clock.Now()
	s.mu.Lock()
	s.pendingAt = now
	s.set++
	s.pending = append([]Spec{}, specs...)
	if s.pending == nil {
		s.pending = []Spec{}
	}
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Applied reports whether the loop has taken the specs of the last
// SetSpecs (they are in force from its next look at the clock).
func (s *Scheduler) Applied() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied == s.set
}

// Start runs the scheduler until Close or ctx ends.
func (s *Scheduler) Start(ctx context.Context) {
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		s.run(ctx)
	}()
}

// Close stops the scheduler and waits for it. Idempotent.
func (s *Scheduler) Close() {
	s.closeOnce.Do(func() {
		if s.cancel != nil {
			s.cancel()
			<-s.done
		}
	})
}

func (s *Scheduler) run(ctx context.Context) {
	for {
		s.apply()
		wake := s.pass(ctx, s.clock.Now())
		if ctx.Err() != nil {
			return
		}
		c, stop := s.clock.Timer(wake)
		select {
		case <-ctx.Done():
			stop()
			return
		case <-c:
		case <-s.changed:
			stop()
		}
	}
}

// apply installs the specs SetSpecs left, if any.
func (s *Scheduler) apply() {
	s.mu.Lock()
	specs, now := s.pending, s.pendingAt
	s.pending = nil
	gen := s.set
	s.mu.Unlock()
	if specs == nil {
		return
	}
	defer func() {
		s.mu.Lock()
		s.applied = gen
		s.mu.Unlock()
	}()
	old := map[string]*state{}
	for _, st := range s.states {
		old[st.spec.Ref] = st
	}
	next := make([]*state, 0, len(specs))
	for _, sp := range specs {
		st, ok := old[sp.Ref]
		switch {
		case !ok:
			st = &state{spec: sp, since: now}
		case !st.spec.same(sp):
			s.opts.Log.Info().Str("trigger_ref", sp.Ref).Str("cron", sp.Cron.String()).Str("timezone", sp.Location.String()).
				Msg("schedule changed; it starts from now")
			// No tick of the new expression before the reload, so neither
			// the queue's newest tick nor a backlog is of any use.
			st.spec, st.known = sp, true
			st.cursor = later(st.cursor, now)
			st.first = st.cursor
		default:
			st.spec = sp
		}
		next = append(next, st)
		delete(old, sp.Ref)
	}
	for ref := range old {
		s.opts.Log.Info().Str("trigger_ref", ref).Msg("schedule removed; it ticks no more")
	}
	s.states = next
}
