package server

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// connTracker knows which connections of a server hold a request that is
// not answered yet (new or active) so that a drain can wait for them.
//
// Why not http.Server.Shutdown alone: a connection accepted just before
// Shutdown whose request is read just after it is closed unanswered (the
// sender sees EOF), since net/http drops requests read while shutting down.
// Under socket activation that is a refused delivery that the next
// instance would have taken. So the drain stops accepting first, waits
// until every accepted connection was answered, and only then shuts down.
type connTracker struct {
	net.Listener
	mu    sync.Mutex
	conns map[net.Conn]http.ConnState

	closeOnce sync.Once
	closeErr  error
}

func newConnTracker(ln net.Listener) *connTracker {
	return &connTracker{Listener: ln, conns: map[net.Conn]http.ConnState{}}
}

// Accept counts a connection as new the moment it is accepted, before the
// server sees it, so that no window hides it from busy.
func (t *connTracker) Accept() (net.Conn, error) {
	c, err := t.Listener.Accept()
	if err == nil {
		t.mu.Lock()
		t.conns[c] = http.StateNew
		t.mu.Unlock()
	}
	return c, err
}

// Close closes the listener once. The drain closes it before Shutdown,
// which closes it again unless Serve already saw the first close and let
// go of it: without this, that race made a clean stop log a "use of
// closed network connection" warning.
func (t *connTracker) Close() error {
	t.closeOnce.Do(func() { t.closeErr = t.Listener.Close() })
	return t.closeErr
}

// ConnState is the server's http.Server.ConnState hook.
func (t *connTracker) ConnState(c net.Conn, s http.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch s {
	case http.StateClosed, http.StateHijacked:
		delete(t.conns, c)
	default:
		t.conns[c] = s
	}
}

// busy counts connections with a request not answered yet.
func (t *connTracker) busy() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, s := range t.conns {
		if s == http.StateNew || s == http.StateActive {
			n++
		}
	}
	return n
}

// drain stops accepting (the listener is closed: under socket activation
// only this process's copy, the socket stays with systemd and its backlog
// waits for the next instance), turns keep-alive off so each answer closes
// its connection, waits until every accepted connection was answered, and
// then shuts the server down. A connection that sends nothing is closed
// by the server's ReadHeaderTimeout; ctx bounds the whole drain.
func (t *connTracker) drain(ctx context.Context, srv *http.Server) error {
	t.Close()
	srv.SetKeepAlivesEnabled(false)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for t.busy() > 0 {
		select {
		case <-ctx.Done():
			return srv.Shutdown(ctx)
		case <-tick.C:
		}
	}
	return srv.Shutdown(ctx)
}
