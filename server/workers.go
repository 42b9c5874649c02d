package server

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	touba "github.com/touba/touba-trigger"

	"github.com/touba/touba-trigger/metrics"
	"github.com/touba/touba-trigger/worker"
)

// Workers that connect out (SPEC §4.3): the Hub where worker bindings'
// calls wait lives as long as the daemon (the stubs carry it into every
// configuration), and its wire shares the webhook listener, so workers
// reach the daemon through the same TLS and proxies as senders.

// workerHub is the daemon's Hub.
func (s *Server) workerHub() *worker.Hub { return s.stubs.Workers }

// workerRunners are the worker bindings of the configuration in force.
func (s *Server) workerRunners() []*worker.Runner {
	c := s.current.Load()
	if c == nil {
		return nil
	}
	var out []*worker.Runner
	for _, b := range c.Bindings {
		if r, ok := b.Runner.(*worker.Runner); ok {
			out = append(out, r)
		}
	}
	return out
}

// withWorkers routes the worker wire's paths to it, the rest to next.
func (s *Server) withWorkers(next http.Handler) http.Handler {
	wire := worker.NewWire(s.workerHub(), s.workerRunners, s.cfg.TrustedProxies,
		s.log.With().Str("component", "workers").Logger())
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, worker.Prefix) {
			wire.ServeHTTP(rw, r)
			return
		}
		next.ServeHTTP(rw, r)
	})
}

// workerCounts are the worker bindings' state for the metrics: the Hub's,
// with the runs handed back on each binding (the dispatcher's count) as
// calls waiting.
func (s *Server) workerCounts() map[string]metrics.WorkerCounts {
	out := map[string]metrics.WorkerCounts{}
	stats := s.workerHub().Stats()
	var held map[string]int64
	if s.disp != nil {
		held = s.disp.Held()
	}
	gatedOn := s.gatedOnWorkers()
	for _, r := range s.workerRunners() {
		st := stats[r.Ref()]
		connected := int64(st.Connected)
		if connected == 0 && st.Seen {
			connected = 1
		}
		out[r.Ref()] = metrics.WorkerCounts{Connected: connected, Waiting: int64(st.Waiting) + held[r.Ref()] + gatedOn[r.Ref()],
			InFlight: int64(st.InFlight), HandedOut: int64(st.HandedOut), TimedOut: int64(st.TimedOut)}
	}
	return out
}

// gatedOnWorkers counts, by worker binding, the runnable entries of the
// triggers whose first tool step is that binding and that wait unleased
// for a worker (dispatcher Gated): calls waiting too.
func (s *Server) gatedOnWorkers() map[string]int64 {
	out := map[string]int64{}
	d, c := s.disp, s.current.Load()
	if d == nil || c == nil || len(d.Gated()) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := s.store.Queue.CountByTrigger(ctx)
	if err != nil {
		return out
	}
	for ref := range d.Gated() {
		t, ok := c.Program.Lookup(strings.TrimPrefix(ref, "trigger:"))
		if !ok {
			continue
		}
		for _, st := range t.Steps {
			if st.Tool == "" {
				continue
			}
			if _, ok := c.Bindings[st.Tool].Runner.(*worker.Runner); ok {
				n := counts[ref]
				out[st.Tool] += max(n[touba.StatusPending]-n["held"]-n[touba.HeldSlot]-n[touba.HeldCircuit], 0)
			}
			break
		}
	}
	return out
}

// noWorker lists the worker bindings no worker was connected to within
// the last 60 s, on this node or (a shared store) any other, for
// `triggers ls` and the console.
func (s *Server) noWorker() []string {
	stats := s.workerHub().Stats()
	var elsewhere map[string]int
	asked := false
	var out []string
	for _, r := range s.workerRunners() {
		if stats[r.Ref()].Seen {
			continue
		}
		if !asked {
			elsewhere, asked = s.workersElsewhere(), true
		}
		if elsewhere[r.Ref()] == 0 {
			out = append(out, r.Ref())
		}
	}
	slices.Sort(out)
	return out
}
