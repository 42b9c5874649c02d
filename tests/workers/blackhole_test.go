package workers_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/sdk/handler"
)

// holeProxy forwards TCP to target until hole: from then on, the
// connections it has forward nothing either way and stay open (a flow a
// firewall or a load balancer dropped without a reset), while new ones
// are forwarded.
type holeProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  []*holeConn
}

type holeConn struct {
	a, b net.Conn
	dead atomic.Bool
}

func newHoleProxy(t *testing.T, target string) *holeProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holeProxy{l: l, target: target}
	t.Cleanup(func() {
		l.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.a.Close()
			c.b.Close()
		}
	})
	go p.serve()
	return p
}

func (p *holeProxy) serve() {
	for {
		a, err := p.l.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			a.Close()
			continue
		}
		c := &holeConn{a: a, b: b}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		go c.pipe(a, b)
		go c.pipe(b, a)
	}
}

// pipe copies from src to dst until the connection is black-holed; then
// it reads and drops what src sends, and never closes dst.
func (c *holeConn) pipe(src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !c.dead.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF || c.dead.Load() {
				return
			}
			dst.Close()
			return
		}
	}
}

// hole black-holes every connection open now.
func (p *holeProxy) hole() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.dead.Store(true)
	}
	n := len(p.conns)
	p.conns = nil
	return n
}

// TestWorkerBehindABlackHole: the worker's connections to the daemon are
// black-holed mid-take (nothing forwarded, no reset) while calls are
// handed out. The worker gives up on them by itself and connects again;
// the calls lost in the hole end unknown at their timeout and are handed
// out again under the same effect id (idempotency_key); every delivery
// ends done, none parked, one effect each.
func TestWorkerBehindABlackHole(t *testing.T) {
	w := newWorld(t, sqliteBackend, touba.RetryIdempotencyKey, 2000)
	w.start("--workers", "8")
	p := newHoleProxy(t, w.d.Addr)
	rec := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// A short take: the SDK bounds one at its wait plus 30 s, which is
		// how long the take caught in the hole hangs.
		wk := &handler.Worker{URL: "http://" + p.l.Addr().String(), Token: token, Tools: []handler.Tool{rec.tool("w1")},
			MaxInFlight: 4, TakeWait: time.Second, Logf: func(format string, args ...any) { t.Logf("w1: "+format, args...) }}
		done <- wk.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})

	w.send(orders, "bh-0", "bh-1", "bh-2")
	w.waitStatus("done", orders, 3, 30*time.Second)

	var held int
	testkit.WaitFor(t, 10*time.Second, func() bool { held = p.hole(); return held > 0 }, "a worker connection to black-hole")
	var later []string
	for i := 3; i < 9; i++ {
		later = append(later, fmt.Sprintf("bh-%d", i))
	}
	w.send(orders, later...)
	// The take open in the hole hangs until the SDK's bound on it (its
	// wait plus 30 s); the deliveries then drain through a new connection.
	w.waitStatus("done", orders, 9, 120*time.Second)
	for _, st := range []string{"parked", "failed", "pending", "running"} {
		if n := w.count(st, orders); n != 0 {
			t.Errorf("%d entries %s after the black hole, want none", n, st)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.effects) != 9 {
		t.Errorf("the worker ran %d effects, want 9 (one per delivery)", len(rec.effects))
	}
	var again []string
	for id, n := range rec.effects {
		if n > 1 {
			again = append(again, fmt.Sprintf("%s ×%d", id, n))
		}
	}
	t.Logf("%d connection(s) black-holed; effects run again under their key: %s", held, strings.Join(again, ", "))
}
