package brokers_test

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// proxy is a TCP proxy on 127.0.0.1 in front of a broker, to lose what the
// broker answers (so a publish reaches the stream and its acknowledgement
// never comes back) or to take the broker off the network.
type proxy struct {
	l      net.Listener
	target string
	mute   atomic.Bool // drop what the broker sends
	down   atomic.Bool // refuse and cut every connection
	mu     sync.Mutex
	conns  []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target}
	t.Cleanup(func() { l.Close(); p.cut() })
	go p.serve()
	return p
}

func (p *proxy) addr() string { return p.l.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		if p.down.Load() {
			c.Close()
			continue
		}
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, b)
		p.mu.Unlock()
		go func() { io.Copy(b, c); b.Close() }()
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := b.Read(buf)
				if n > 0 && !p.mute.Load() {
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			c.Close()
		}()
	}
}

// cut closes every connection through the proxy.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// setDown takes the broker off the network (true) or puts it back.
func (p *proxy) setDown(down bool) {
	p.down.Store(down)
	if down {
		p.cut()
	}
}
