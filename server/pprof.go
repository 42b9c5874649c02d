package server

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
)

// EnvPprof names a loopback address (127.0.0.1:6060) on which serve answers
// net/http/pprof's /debug/pprof/ for profiling (scripts/profile). Off by
// default and never on another interface: a profile shows the daemon's
// memory and stacks, so it is not for the network.
const EnvPprof = "TOUBA_PPROF"

// StartPprof serves /debug/pprof/ on TOUBA_PPROF's address when it is set.
// It returns a stop func (a no-op when off).
func StartPprof(log zerolog.Logger) (func(), error) {
	addr := os.Getenv(EnvPprof)
	if addr == "" {
		return func() {}, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, touba.Errorf(touba.EUsage, "%s=%q: %v", EnvPprof, addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, touba.Errorf(touba.EUsage, "%s=%q: only a loopback address is allowed", EnvPprof, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, touba.Errorf(touba.EUsage, "%s: %v", EnvPprof, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn().Err(err).Msg("pprof listener stopped")
		}
	}()
	log.Warn().Str("addr", ln.Addr().String()).Msg(fmt.Sprintf("%s set: profiling endpoints served (not for production)", EnvPprof))
	return func() { srv.Close() }, nil
}
