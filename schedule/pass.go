package schedule

import (
	"context"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
)

// pass enqueues what is due at now and returns when the next pass is
// needed. Due ticks go first, so a backlog never delays another schedule's
// due tick by more than one pass's share of catch-up.
func (s *Scheduler) pass(ctx context.Context, now time.Time) time.Time {
	for _, st := range s.states {
		s.stepDue(ctx, st, now)
	}
	s.catchUp(ctx, now)
	wake := now.Add(maxWait)
	for _, st := range s.states {
		if at := s.nextLook(st, now); !at.IsZero() && at.Before(wake) {
			wake = at
		}
	}
	return wake
}

// stepDue enqueues st's due ticks, at most perPass: on its first pass
// those catch_up keeps, unless a catch_up "all" backlog is left to
// catchUp, which st's due ticks then wait for.
func (s *Scheduler) stepDue(ctx context.Context, st *state, now time.Time) {
	if now.Before(st.retryAt) || !s.read(ctx, st, now) {
		return
	}
	if !st.caught && !s.settle(ctx, st, now) {
		return
	}
	// Past the retention a clock that jumped forward owes nothing.
	due := ticks(st.spec, later(st.cursor, now.Add(-s.opts.Retention)), now, perPass)
	if _, ok := s.enqueue(ctx, st, due, now); ok && len(due) < perPass {
		st.cursor = later(st.cursor, now)
	}
}

// read sets st's cursor on its first pass: the newest tick the queue
// knows of it (on any node, its entry forgotten or not), else since. False when the queue cannot say.
func (s *Scheduler) read(ctx context.Context, st *state, now time.Time) bool {
	if st.known {
		return true
	}
	id, err := s.opts.Ticks.LatestTickID(ctx, st.spec.Ref)
	if err != nil {
		if ctx.Err() == nil {
			s.opts.Log.Warn().Err(err).Str("trigger_ref", st.spec.Ref).Msg("cannot read the schedule's latest tick; retrying")
		}
		st.retryAt = now.Add(retryEvery)
		return false
	}
	st.known, st.cursor = true, st.since
	// One after since (a node whose clock runs ahead) means none is due
	// before it.
	if t, err := time.Parse(time.RFC3339, id); id != "" && err == nil {
		st.cursor = t
	}
	st.first = st.cursor
	return true
}

// settle handles st's ticks up to since per catch_up; false while a
// catch_up "all" backlog is left, or when the queue refused.
func (s *Scheduler) settle(ctx context.Context, st *state, now time.Time) bool {
	switch st.spec.CatchUp {
	case CatchUpAll:
		if len(s.backlog(st, 1)) > 0 {
			return false
		}
	case CatchUpNone:
		// Those at most Grace old are on time: due ticks, not missed.
		st.cursor = later(st.cursor, st.since.Add(-s.opts.Grace))
	default:
		if t := latest(st.spec.Cron, st.spec.Location, st.cursor, st.since); !t.IsZero() {
			if _, ok := s.enqueue(ctx, st, []time.Time{t}, now); !ok {
				return false
			}
		}
		st.cursor = later(st.cursor, st.since)
	}
	s.started(st)
	return true
}

// catchUp enqueues at most perPass ticks of the catch_up "all" backlogs,
// oldest first, the schedules in turn: the one after the schedule that
// used up the last pass's share goes first.
func (s *Scheduler) catchUp(ctx context.Context, now time.Time) {
	budget := perPass
	for i := range len(s.states) {
		k := (s.turn + i) % len(s.states)
		st := s.states[k]
		if st.caught || !st.known || now.Before(st.retryAt) || ctx.Err() != nil {
			continue
		}
		n, ok := s.enqueue(ctx, st, s.backlog(st, budget), now)
		if ok && !st.caught && len(s.backlog(st, 1)) == 0 {
			s.started(st)
		}
		if budget -= n; budget <= 0 {
			s.turn = k + 1
			return
		}
	}
}

// backlog is st's next n missed ticks that catch_up "all" enqueues: in
// (cursor, since], at most Retention older than since.
func (s *Scheduler) backlog(st *state, n int) []time.Time {
	return ticks(st.spec, later(st.cursor, st.since.Add(-s.opts.Retention)), st.since, n)
}

func (s *Scheduler) started(st *state) {
	st.caught = true
	s.opts.Log.Info().Str("trigger_ref", st.spec.Ref).Time("from", st.first).Int("caught_up", st.caughtUp).
		Str("catch_up", st.spec.CatchUp).Time("next_tick", st.spec.Cron.Next(st.cursor, st.spec.Location)).
		Msg("schedule started")
}

// enqueue offers due in order, the cursor following each one taken. It
// returns how many it offered, and false when the queue refused one: the
// cursor stays before it, and st is left alone for retryEvery.
func (s *Scheduler) enqueue(ctx context.Context, st *state, due []time.Time, now time.Time) (int, bool) {
	for i, at := range due {
		status, _, err := s.opts.Enqueue.EnqueueTick(ctx, st.spec.Ref, at)
		switch {
		case touba.ErrorCode(err) == touba.ETriggerNotFound:
			// Reloaded away; SetSpecs follows.
			st.caught, st.cursor = true, later(st.cursor, now)
			return i + 1, true
		case err != nil:
			if ctx.Err() == nil {
				s.opts.Log.Warn().Err(err).Str("trigger_ref", st.spec.Ref).Time("scheduled_for", at).Msg("tick not enqueued; retrying")
			}
			st.retryAt = now.Add(retryEvery)
			return i + 1, false
		case status != touba.IntakeEnqueued:
			s.opts.Log.Debug().Str("trigger_ref", st.spec.Ref).Time("scheduled_for", at).Str("status", status).Msg("tick already enqueued")
		default:
			// Enqueued, not yet the cursor here: a restart finds the
			// tick in the queue's schedule cursor, which moved in the
			// tick's own transaction (LatestTickID), and enqueues it no
			// second time.
			crashpoint.Hit(CrashAfterTick)
			if !st.caught {
				st.caughtUp++
			}
		}
		st.cursor = at
	}
	return len(due), true
}

// nextLook is when st next needs a pass: at once while a backlog is left.
func (s *Scheduler) nextLook(st *state, now time.Time) time.Time {
	switch {
	case now.Before(st.retryAt):
		return st.retryAt
	case !st.caught:
		return now
	}
	return st.spec.Cron.Next(st.cursor, st.spec.Location)
}
