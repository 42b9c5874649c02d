package schedule

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
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
// the queue's LatestTickID.
type TickStore interface {
	LatestTickID(ctx context.Context, triggerRef string) (string, error)
}

// Options configure a Scheduler.
type Options struct {
	Enqueue Enqueuer
	Ticks   TickStore
	Clock   Clock // nil: System
	// Retention bounds catch_up "all": ticks older than this are not
	// enqueued (--retention; 0 is DefaultRetention).
	Retention time.Duration
	// Grace is how late a tick may be enqueued and still count as on
	// time rather than missed (0: DefaultGrace).
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
	// maxCatchUp bounds the ticks enqueued in one pass (the newest are
	// kept): a year of a per-minute cron under a long --retention.
	maxCatchUp = 100_000
)

// Scheduler enqueues the ticks of the program's schedule triggers.
//
// For each schedule it keeps a cursor: every tick up to it was handled.
// At start (New, and SetSpecs for a schedule new to the program) the
// cursor is the newest tick the queue holds for the trigger; ticks after
// it and up to that start were missed and are enqueued per catch_up (a
// tick at most Grace old is on time, not missed), then each tick is
// enqueued when the clock reaches it. A schedule the queue holds no tick
// of starts then: nothing before its first start is missed. Enqueueing a
// tick twice (a restart, another node) is harmless: the identity rule
// answers it duplicate or consumed and nothing runs again.
type Scheduler struct {
	opts  Options
	clock Clock

	mu        sync.Mutex
	pending   []Spec    // set by SetSpecs, taken by the loop
	pendingAt time.Time // when SetSpecs was called
	changed   chan struct{}

	states map[string]*state // owned by the loop

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

type state struct {
	spec   Spec
	cursor time.Time // every tick at or before it is handled
	known  bool      // cursor read from the queue
	since  time.Time // when it joined: the cursor when the queue has no tick
	caught bool      // its first pass (the catch-up) is done
	missed int       // ticks enqueued by the catch-up so far
	// owed is the oldest tick the queue refused (zero: none): it and every
	// tick after it came due while this daemon ran, so all of them are
	// enqueued once the queue takes them, whatever catch_up says (catch_up
	// is about ticks missed while no daemon ran).
	owed time.Time
}

// New returns a Scheduler for specs; Start runs it.
func New(specs []Spec, opts Options) *Scheduler {
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	s := &Scheduler{opts: opts, clock: opts.Clock, changed: make(chan struct{}, 1), states: map[string]*state{}}
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
		now := s.clock.Now()
		wake := now.Add(maxWait)
		for _, st := range s.states {
			if at := s.step(ctx, st, now); at.Before(wake) {
				wake = at
			}
		}
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
	s.mu.Unlock()
	if specs == nil {
		return
	}
	next := map[string]*state{}
	for _, sp := range specs {
		st, ok := s.states[sp.Ref]
		switch {
		case !ok:
			st = &state{spec: sp, since: now}
		case !st.spec.same(sp):
			s.opts.Log.Info().Str("trigger_ref", sp.Ref).Str("cron", sp.Cron.String()).Str("timezone", sp.Location.String()).
				Msg("schedule changed; it starts from now")
			st.spec = sp
			st.owed = time.Time{}
			if st.cursor.Before(now) {
				st.cursor = now
			}
		default:
			st.spec = sp
		}
		next[sp.Ref] = st
	}
	s.states = next
}

// step enqueues st's due ticks and returns when it next needs a look.
func (s *Scheduler) step(ctx context.Context, st *state, now time.Time) time.Time {
	log := s.opts.Log.With().Str("trigger_ref", st.spec.Ref).Logger()
	if !st.known {
		id, err := s.opts.Ticks.LatestTickID(ctx, st.spec.Ref)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn().Err(err).Msg("cannot read the schedule's latest tick; retrying")
			}
			return now.Add(retryEvery)
		}
		st.known, st.cursor = true, st.since
		if id != "" {
			// Ticks after it up to now were missed; one after now (a node
			// whose clock runs ahead) means none is due before it.
			if t, err := time.Parse(time.RFC3339, id); err == nil {
				st.cursor = t
			}
		}
	}
	from := st.cursor
	if !st.caught {
		// The catch-up is of the ticks missed before the schedule joined,
		// whenever this first pass gets to run.
		if !s.enqueueDue(ctx, st, st.since, log) {
			return now.Add(retryEvery)
		}
		st.caught = true
		log.Info().Time("from", from).Int("caught_up", st.missed).Str("catch_up", st.spec.CatchUp).
			Time("next_tick", st.spec.Cron.Next(st.cursor, st.spec.Location)).Msg("schedule started")
	}
	if !s.enqueueDue(ctx, st, now, log) {
		return now.Add(retryEvery)
	}
	return st.spec.Cron.Next(st.cursor, st.spec.Location)
}

// enqueueDue enqueues st's ticks due by now and moves its cursor to now;
// false when the queue refused one (the cursor stays before it).
func (s *Scheduler) enqueueDue(ctx context.Context, st *state, now time.Time, log zerolog.Logger) bool {
	for _, at := range s.due(st, now) {
		status, _, err := s.opts.Enqueue.EnqueueTick(ctx, st.spec.Ref, at)
		if err != nil {
			if touba.ErrorCode(err) == touba.ETriggerNotFound {
				break // reloaded away; SetSpecs follows
			}
			if ctx.Err() == nil {
				log.Warn().Err(err).Time("scheduled_for", at).Msg("tick not enqueued; retrying")
			}
			if st.owed.IsZero() || at.Before(st.owed) {
				st.owed = at
			}
			return false
		}
		if status != touba.IntakeEnqueued {
			log.Debug().Time("scheduled_for", at).Str("status", status).Msg("tick already enqueued")
		} else {
			// Enqueued, not yet the cursor: a restart finds the tick in
			// the queue (LatestTickID) and enqueues it no second time.
			crashpoint.Hit(CrashAfterTick)
			if !st.caught {
				st.missed++
			}
		}
		st.cursor = at
	}
	st.owed = time.Time{}
	if st.cursor.Before(now) {
		st.cursor = now
	}
	return true
}

// due are the ticks of st in (cursor, now] to enqueue, oldest first: a
// tick at most Grace old is on time and always enqueued; older ones were
// missed and follow catch_up, except from a tick the queue refused on
// (owed), after which every tick is enqueued.
func (s *Scheduler) due(st *state, now time.Time) []time.Time {
	c, loc := st.spec.Cron, st.spec.Location
	from := st.cursor
	if !from.Before(now) {
		return nil
	}
	catchUp := st.spec.CatchUp
	if !st.owed.IsZero() {
		// A refused tick and those after it: every one, none missed.
		catchUp, from = CatchUpAll, st.owed.Add(-time.Nanosecond)
	}
	switch catchUp {
	case CatchUpAll:
		if limit := now.Add(-s.opts.Retention); from.Before(limit) {
			from = limit
		}
	case CatchUpNone:
		if limit := now.Add(-s.opts.Grace); from.Before(limit) {
			from = limit
		}
	default:
		if t := latest(c, loc, from, now); !t.IsZero() {
			return []time.Time{t}
		}
		return nil
	}
	var out []time.Time
	for t := c.Next(from, loc); !t.IsZero() && !t.After(now); t = c.Next(t, loc) {
		out = append(out, t)
		if len(out) == 2*maxCatchUp {
			out = append(out[:0], out[maxCatchUp:]...)
		}
	}
	// The newest ones: those a long --retention would lose are the oldest.
	if len(out) > maxCatchUp {
		out = out[len(out)-maxCatchUp:]
	}
	return out
}

// latest is the last tick in (from, to], or zero: searched in windows
// back from to that double until one holds a tick, so it costs about the
// ticks of one window whether the cron ticks every minute or every year.
func latest(c *Cron, loc *time.Location, from, to time.Time) time.Time {
	for win := time.Hour; ; win *= 2 {
		start := to.Add(-win)
		if !start.After(from) {
			start = from
		}
		var last time.Time
		for t := c.Next(start, loc); !t.IsZero() && !t.After(to); t = c.Next(t, loc) {
			last = t
		}
		if !last.IsZero() || start.Equal(from) {
			return last
		}
	}
}
