package server

import (
	"net/http"
	"strings"

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
