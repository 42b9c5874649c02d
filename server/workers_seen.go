package server

import (
	"context"
	"time"
)

// On a database shared by several nodes a worker connects to one of them
// (SPEC §4.3), so whether a binding "has a worker" is the cluster's
// question: each node records, every workerSeenEvery, the bindings it had
// a worker of within the last 60 s, and `triggers ls` and the console ask
// the database as well as their own node.

// workerPresence is the store's record of the nodes' workers.
type workerPresence interface {
	// Seen records that this node has a worker of each of refs connected.
	Seen(ctx context.Context, refs []string) error
	// SeenWithin is the bindings some node had a worker of within d.
	SeenWithin(ctx context.Context, d time.Duration) (map[string]int, error)
}

// workerSeenEvery is how often a node records its workers: well inside
// the 60 s a worker counts as connected after its last take.
const workerSeenEvery = 5 * time.Second

// workerSeenWithin is how long a recorded worker counts as connected on
// another node: SPEC §4.3's 60 s, plus one record's interval.
const workerSeenWithin = 60*time.Second + workerSeenEvery

// recordWorkers records this node's workers every workerSeenEvery until
// ctx ends; nothing without a shared store.
func (s *Server) recordWorkers(ctx context.Context) {
	if s.store.Workers == nil {
		return
	}
	t := time.NewTicker(workerSeenEvery)
	defer t.Stop()
	failing := false
	for {
		var refs []string
		for ref, st := range s.workerHub().Stats() {
			if st.Seen {
				refs = append(refs, ref)
			}
		}
		wctx, cancel := context.WithTimeout(ctx, workerSeenEvery)
		err := s.store.Workers.Seen(wctx, refs)
		cancel()
		if err != nil && !failing && ctx.Err() == nil {
			s.log.Warn().Err(err).Msg("cannot record this node's workers; other nodes may report no worker for its bindings")
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// workersElsewhere is the bindings another node (or this one) recorded a
// worker of within workerSeenWithin; empty without a shared store or
// when the database does not answer.
func (s *Server) workersElsewhere() map[string]int {
	if s.store.Workers == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	seen, err := s.store.Workers.SeenWithin(ctx, workerSeenWithin)
	if err != nil {
		s.log.Warn().Err(err).Msg("cannot read the other nodes' workers")
		return nil
	}
	return seen
}
