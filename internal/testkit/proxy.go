package testkit

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a TCP proxy on 127.0.0.1 in front of a server, to make the
// faults a network makes between the daemon and what it talks to:
//
//   - Mute: what the server sends is dropped, what the client sends still
//     arrives (a request reaches the server, its answer is lost);
//   - Down: new connections are refused and open ones cut (a reset: the
//     peer knows at once);
//   - Hole: open connections forward nothing either way and stay open (a
//     flow a firewall or a load balancer dropped without a reset: the peer
//     learns it only from its own timeouts); with HoleNew, new connections
//     are accepted and black-holed too (a route that swallows everything).
type Proxy struct {
	l       net.Listener
	target  string
	mute    atomic.Bool
	down    atomic.Bool
	holeNew atomic.Bool
	mu      sync.Mutex
	conns   []*proxyConn
}

// proxyConn is one client connection and its connection to the server.
type proxyConn struct {
	a, b net.Conn
	dead atomic.Bool // black-holed: forwards nothing, closes nothing
}

// NewProxy starts a proxy in front of target (host:port), closed with tb.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{l: l, target: target}
	tb.Cleanup(func() { l.Close(); p.Cut() })
	go p.serve()
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Mute drops what the server sends (true) or forwards it again (false).
func (p *Proxy) Mute(on bool) { p.mute.Store(on) }

// Down refuses new connections and cuts the open ones (true), or lets
// connections through again (false).
func (p *Proxy) Down(on bool) {
	p.down.Store(on)
	if on {
		p.Cut()
	}
}

// Cut closes every open connection.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.a.Close()
		c.b.Close()
	}
	p.conns = nil
}

// Hole black-holes every open connection and returns how many there were.
// They stay black-holed: a connection the client opens later is forwarded
// unless HoleNew says otherwise.
func (p *Proxy) Hole() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.conns {
		if !c.dead.Swap(true) {
			n++
		}
	}
	return n
}

// HoleNew black-holes the connections accepted from now on (true), or
// forwards them again (false). Connections black-holed meanwhile stay so.
func (p *Proxy) HoleNew(on bool) { p.holeNew.Store(on) }

func (p *Proxy) serve() {
	for {
		a, err := p.l.Accept()
		if err != nil {
			return
		}
		if p.down.Load() {
			a.Close()
			continue
		}
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			a.Close()
			continue
		}
		c := &proxyConn{a: a, b: b}
		c.dead.Store(p.holeNew.Load())
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		go c.pipe(a, b, nil)
		go c.pipe(b, a, &p.mute)
	}
}

// pipe copies src to dst until the connection ends; muted (when mute is
// set) or black-holed, what src sends is read and dropped. A black-holed
// connection is never closed by the proxy: its peers must find out
// themselves.
func (c *proxyConn) pipe(src, dst net.Conn, mute *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !c.dead.Load() && (mute == nil || !mute.Load()) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				return
			}
		}
		if err != nil {
			if !c.dead.Load() {
				dst.Close()
			}
			return
		}
	}
}
