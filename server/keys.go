package server

import (
	"context"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/trigger"
)

// listenToHeldKeys has intake keep reading the wait and cancel keys the
// store's unfinished entries hold but p no longer produces (SPEC §2.3:
// keys by meaning survive a reload), before p is given to intake. A store
// that cannot say is logged: intake then reads p's own keys only.
func (s *Server) listenToHeldKeys(p *trigger.Program) {
	ks, ok := s.store.Queue.(touba.KeyStore)
	if !ok || p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys, err := ks.KeysInUse(ctx)
	if err != nil {
		s.log.Error().Err(err).Msg("cannot list the wait and cancel keys of accepted entries; intake reads the program's own keys only")
		return
	}
	p.ListenToKeys(keys)
}
