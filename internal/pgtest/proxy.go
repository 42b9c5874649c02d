package pgtest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a cluster and can be switched to a
// black hole: it stops forwarding in both directions and keeps every
// connection open (new ones are accepted and left unanswered), as a
// network that drops packets does; healed, it forwards what was held.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cond  *sync.Cond
	hole  bool
	conns []net.Conn
}

// NewProxy starts a proxy to the host and port of dsn and returns it with
// dsn rewritten to go through it; both stop when t ends.
func NewProxy(t testing.TB, dsn string) (*Proxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: u.Host}
	p.cond = sync.NewCond(&p.mu)
	go p.accept()
	t.Cleanup(p.Close)
	u.Host = ln.Addr().String()
	return p, u.String()
}

// BlackHole stops (true) or resumes (false) all forwarding.
func (p *Proxy) BlackHole(on bool) {
	p.mu.Lock()
	p.hole = on
	p.mu.Unlock()
	p.cond.Broadcast()
}

// Close stops the proxy and cuts every connection.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.hole = false
	p.mu.Unlock()
	p.cond.Broadcast()
}

// wait blocks while the proxy is a black hole.
func (p *Proxy) wait() {
	p.mu.Lock()
	for p.hole {
		p.cond.Wait()
	}
	p.mu.Unlock()
}

func (p *Proxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c)
		go func() {
			p.wait()
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				return
			}
			p.track(s)
			go p.pipe(s, c)
			p.pipe(c, s)
		}()
	}
}

// pipe copies from src to dst, holding the data while the proxy is a
// black hole (it reads nothing then: the bytes wait in the kernel).
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		p.wait()
		n, err := src.Read(buf)
		if n > 0 {
			p.wait()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}
