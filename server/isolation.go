package server

import (
	"strings"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/manifest"
)

// isolationProbe says how this host isolates a handler's network, or why
// it cannot (handler.IsolationMethod); a variable so tests can stand in.
var isolationProbe = handler.IsolationMethod

// checkIsolation refuses the process bindings of m without the network
// grant when this host cannot start their handlers without network (SPEC
// §2.2: NetworkIsolationUnavailable, exit 2), unless allow
// (--allow-unisolated-handlers): then it warns, naming them, every time a
// configuration is put in force. Never silently.
func checkIsolation(m *manifest.Manifest, allow bool, log zerolog.Logger) error {
	refs := m.NeedNetworkIsolation()
	if len(refs) == 0 {
		return nil
	}
	method, err := isolationProbe()
	switch {
	case err == nil:
		log.Info().Strs("bindings", refs).Str("isolation", method).Msg("handlers without the network grant run without network")
		return nil
	case !allow:
		return touba.Errorf(touba.ENetworkIsolationUnavailable,
			"this host cannot run a handler without network (%v), and binding %s has no network grant; "+
				"allow user namespaces (see handler/ISOLATION.md), grant it the network, or pass --allow-unisolated-handlers "+
				"to run it with the host's network", err, strings.Join(refs, ", "))
	}
	log.Warn().Strs("bindings", refs).Str("reason", err.Error()).
		Msg("network isolation unavailable; --allow-unisolated-handlers: these bindings without the network grant run with the host's network")
	return nil
}
