package testkit

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/touba/touba-trigger/server"
)

// Server is the daemon running in the test's own process: what a test
// needs when it sends no signal to the daemon, faster to start than a
// child and with its failures in the test's own stack.
type Server struct {
	*server.Server
	tb     testing.TB
	log    *syncBuffer
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	runErr error

	stopOnce sync.Once
	stopErr  error
}

// StartServer opens and runs the server on cfg with serve's defaults for
// the limits cfg leaves zero (ServeDefaults; Workers 0 stays intake only),
// Listen "127.0.0.1:0" unless set, and a log the test can read (Log). It
// returns once every listener is bound; the test's cleanup stops it.
func StartServer(tb testing.TB, cfg server.Config) *Server {
	tb.Helper()
	cfg = ServeDefaults(cfg)
	s := &Server{tb: tb, log: &syncBuffer{}, done: make(chan struct{})}
	cfg.Log = zerolog.New(s.log).Level(zerolog.InfoLevel).With().Timestamp().Logger() // serve's --log-level
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	srv, err := server.Open(ctx, cfg)
	if err != nil {
		cancel()
		tb.Fatalf("server.Open: %v\n%s", err, s.log.String())
	}
	s.Server = srv
	go func() {
		defer close(s.done)
		s.runErr = srv.Run(ctx)
	}()
	tb.Cleanup(func() {
		s.Stop()
		if tb.Failed() {
			tb.Logf("server log:\n%s", s.Log())
		}
	})
	select {
	case <-srv.Ready():
	case <-s.done:
		tb.Fatalf("server stopped before it was ready: %v\n%s", s.runErr, s.Log())
	case <-time.After(30 * time.Second):
		tb.Fatalf("server not ready within 30s\n%s", s.Log())
	}
	return s
}

// ServeDefaults fills the limits c leaves zero with serve's defaults
// (SPEC §3), and Listen with a free loopback port.
func ServeDefaults(c server.Config) server.Config {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	if c.MaxPending == 0 {
		c.MaxPending = 1_000_000
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.LogMaxRows == 0 {
		c.LogMaxRows = 1_000_000
	}
	if c.LogMaxAge == 0 {
		c.LogMaxAge = 168 * time.Hour
	}
	if c.LogMaxBodyBytes == 0 {
		c.LogMaxBodyBytes = 256 << 20
	}
	if c.LogMaxBytes == 0 {
		c.LogMaxBytes = 1 << 30
	}
	return c
}

// URL is the webhook listener's base URL.
func (s *Server) URL() string { return "http://" + s.Addr().String() }

// MetricsURL is the metrics listener's base URL.
func (s *Server) MetricsURL() string { return "http://" + s.MetricsAddr().String() }

// Log is what the server logged so far, one JSON object a line.
func (s *Server) Log() string { return s.log.String() }

// WaitLog waits until the log holds substr.
func (s *Server) WaitLog(substr string, timeout time.Duration) {
	s.tb.Helper()
	WaitFor(s.tb, timeout, func() bool { return strings.Contains(s.Log(), substr) }, "the server to log "+strconv.Quote(substr))
}

// Stop drains the server as SIGTERM does (SPEC §3.3), closes its files and
// returns what Run and Close returned: the files are then free for the
// CLI or the next server. Idempotent.
func (s *Server) Stop() error {
	s.tb.Helper()
	s.stopOnce.Do(func() {
		s.cancel()
		select {
		case <-s.done:
		case <-time.After(60 * time.Second):
			s.tb.Fatalf("server still running 60s after its stop\n%s", s.Log())
		}
		s.stopErr = s.runErr
		if err := s.Close(); s.stopErr == nil {
			s.stopErr = err
		}
	})
	return s.stopErr
}

// syncBuffer is a bytes.Buffer safe for the writer and the test reading.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
