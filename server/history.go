package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/trigger"
)

// --history (SPEC §8.1) is one loop per node: a pass at most every
// HistoryEvery, forgetting what is finished and older than the window
// (the backend bounds each pass; a pass that stopped at its bound is
// followed by the next one shortly), and a measure of the storage for the
// metrics and the console's overview after each pass.

// HistoryEvery is how often the loop runs a pass under a window: a
// twentieth of it, between one second and five minutes, so an entry
// outlives the window by at most that much (plus, on PostgreSQL, the
// width of a partition).
func HistoryEvery(window time.Duration) time.Duration {
	return min(max(window/20, time.Second), 5*time.Minute)
}

// measureEvery is how often the loop measures the storage when no pass
// runs (--history 0) or passes are rare.
const measureEvery = 30 * time.Second

// moreAfter is the pause between two passes when the first stopped at its
// bound: the writers and the database serve everything else in between.
const moreAfter = 100 * time.Millisecond

// historyLoop is the daemon's --history: its last pass and measure.
type historyLoop struct {
	store  touba.HistoryStore
	window time.Duration
	log    zerolog.Logger
	// onPass sees each pass (metrics).
	onPass func(touba.PruneReport, error)

	last    atomic.Pointer[admin.PassReport]
	measure atomic.Pointer[touba.StorageReport]
}

// run runs passes and measures until ctx ends.
func (h *historyLoop) run(ctx context.Context) {
	every := measureEvery
	if h.window > 0 {
		every = min(HistoryEvery(h.window), measureEvery)
	}
	var lastMeasure time.Time
	for {
		wait := every
		if h.window > 0 {
			if more := h.pass(ctx); more {
				wait = moreAfter
			}
		}
		if ctx.Err() != nil {
			return
		}
		if wait != moreAfter || time.Since(lastMeasure) >= measureEvery {
			h.measureNow(ctx)
			lastMeasure = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// pass runs one pass and records it; it tells whether more is left.
func (h *historyLoop) pass(ctx context.Context) bool {
	start := time.Now()
	rep, err := h.store.Prune(ctx, start.Add(-h.window))
	if ctx.Err() != nil {
		return false
	}
	pr := &admin.PassReport{PruneReport: rep, At: start, Took: time.Since(start).Seconds()}
	if err != nil {
		pr.Error = err.Error()
		h.log.Error().Err(err).Msg("history pass failed")
	} else if rep.Entries > 0 || rep.Partitions > 0 || rep.Created > 0 || (rep.Skipped > 0 && rep.More) {
		h.log.Info().Int64("entries", rep.Entries).Int64("effects", rep.Effects).Int("partitions_dropped", rep.Partitions).
			Int("partitions_created", rep.Created).Int64("kept", rep.Kept).Int("skipped", rep.Skipped).Bool("more", rep.More).Dur("took", time.Since(start)).
			Dur("history", h.window).Msg("forgot what is past --history")
	}
	h.last.Store(pr)
	if h.onPass != nil {
		h.onPass(rep, err)
	}
	return err == nil && rep.More
}

// measureNow measures the storage and keeps the result.
func (h *historyLoop) measureNow(ctx context.Context) {
	var before time.Time
	if h.window > 0 {
		before = time.Now().Add(-h.window)
	}
	rep, err := h.store.Storage(ctx, before)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn().Err(err).Msg("measure storage")
		}
		return
	}
	h.measure.Store(rep)
}

// HistoryWarnings says where --history (window) is shorter than what the
// program may still need of an older entry: a wait_for timeout (an entry
// awaited or a redelivery of it may be forgotten while the wait goes on),
// and twice a schedule's period (its ticks' entries are forgotten about
// as soon as the next tick comes: the schedule cursor alone, which
// --history never forgets, keeps a tick from being enqueued again, and a
// node of a release before the cursor reads entries alone; issue 42).
// window 0 keeps everything.
func HistoryWarnings(p *trigger.Program, window time.Duration) []string {
	if window <= 0 || p == nil {
		return nil
	}
	var out []string
	for _, t := range p.Triggers {
		for _, st := range t.Steps {
			if w := st.WaitFor; w != nil {
				if d := time.Duration(w.TimeoutMS) * time.Millisecond; w.TimeoutMS == 0 || d > window {
					timeout := d.String()
					if w.TimeoutMS == 0 {
						timeout = "none"
					}
					out = append(out, fmt.Sprintf("%s: step %s waits for %s with timeout %s, longer than --history %s: "+
						"a delivery it awaits may be forgotten, and its redelivery accepted as new, while the wait goes on",
						t.Ref, st.ID, w.Trigger, timeout, window))
				}
			}
		}
		if sc := t.Source.Schedule; sc != nil {
			if period := sc.Cron.Period(time.Now(), sc.Location); window < 2*period {
				out = append(out, fmt.Sprintf("%s: --history %s is shorter than twice the period %s of its schedule %q: "+
					"a tick's entry is forgotten about when the next one comes; the schedule's cursor still keeps it "+
					"from being enqueued twice, but a node of a release without schedule cursors would enqueue it again, "+
					"and the queue shows no earlier tick",
					t.Ref, window, period, sc.Cron.String()))
			}
		}
	}
	return out
}

// watchHistory sets up the --history loop and its metrics, when the
// backend forgets and measures.
func (s *Server) watchHistory() {
	if s.store.History == nil {
		return
	}
	s.history = &historyLoop{store: s.store.History, window: s.cfg.History, log: s.log.With().Str("component", "history").Logger()}
	kind := "file"
	if s.cfg.Database != "" {
		kind = "table"
	}
	s.history.onPass = s.metrics.WatchStorage(kind, s.history.measure.Load, s.cfg.History)
}
