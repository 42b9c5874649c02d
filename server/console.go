package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/console"
)

// startConsole binds --console-listen and serves the operator console
// (SPEC §6.1) over the same admin service as the socket. Off without a
// listen address; a listen address without a token is refused.
func (s *Server) startConsole() error {
	if s.cfg.ConsoleListen == "" {
		return nil
	}
	if len(s.cfg.ConsoleToken) == 0 {
		return touba.Errorf(touba.EConsoleTokenRequired,
			"--console-listen %s needs a token: --console-token-file FILE or the systemd credential console-token", s.cfg.ConsoleListen)
	}
	con, err := console.New(console.Config{Service: s.adminService(), Token: s.cfg.ConsoleToken,
		Log: s.log.With().Str("component", "console").Logger(), TrustedProxies: s.cfg.TrustedProxies})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.cfg.ConsoleListen)
	if err != nil {
		return fmt.Errorf("console listen %s: %w", s.cfg.ConsoleListen, err)
	}
	s.consoleAddr = ln.Addr()
	s.consoleSrv = &http.Server{Handler: con, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10}
	go func() {
		if err := s.consoleSrv.Serve(ln); err != nil && err != http.ErrServerClosed {
			s.log.Error().Err(err).Msg("console stopped")
		}
	}()
	s.log.Info().Str("addr", ln.Addr().String()).Msg("console listening")
	return nil
}

// stopConsole stops the console; operators can look until the end.
func (s *Server) stopConsole(ctx context.Context) {
	if s.consoleSrv != nil {
		s.consoleSrv.Shutdown(ctx)
	}
}

// ConsoleAddr is the console listener's address once Ready; nil without.
func (s *Server) ConsoleAddr() net.Addr { return s.consoleAddr }
