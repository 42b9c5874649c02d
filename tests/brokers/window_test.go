package brokers_test

import (
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/natstest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// A stream with a 2 s duplicate_window, a 1 s publish timeout: a publish
// whose acknowledgement is lost is unknown, and first dispatch + 2 s − 1 s
// has passed by then; the broker is then down for 5 s. The effect is
// parked EffectReconciliationRequired naming its effect id, and never
// published again: the stream holds it once, after the broker is back too.
func TestNATSUnknownOutsideWindowIsParked(t *testing.T) {
	s, p, w := natsBehindProxy(t, 2*time.Second)
	p.Mute(true) // the next publish reaches the stream; its ack is lost
	status, id := w.post("ord-1", "s.example")
	if status != http.StatusAccepted {
		t.Fatalf("post: %d", status)
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return byEffect(t, s)[id+":publish"] == 1 }, "the message in the stream")
	p.Down(true)
	p.Mute(false)
	testkit.WaitFor(t, 30*time.Second, func() bool {
		d := w.entry(id)
		return d != nil && d.Status == touba.StatusParked
	}, "the entry parked")
	time.Sleep(5 * time.Second) // the broker down for 5 s
	p.Down(false)
	w.d.WaitLog("nats reconnected", 30*time.Second)
	d := w.entry(id)
	if d.Status != touba.StatusParked || d.ErrorCode != touba.EEffectReconciliationRequired ||
		!strings.Contains(d.ErrorMessage, id+":publish") || !strings.Contains(d.ErrorMessage, "stream ORDERS") {
		t.Fatalf("entry %s %s: %s", d.Status, d.ErrorCode, d.ErrorMessage)
	}
	w.stop()
	if n := byEffect(t, s)[id+":publish"]; n != 1 {
		t.Fatalf("the effect is %d times in the stream, want once", n)
	}
	effects, _ := testkit.Effects(t, w.jrn)
	if len(effects) != 1 || effects[0].State != touba.EffectUnknown {
		t.Fatalf("effects %+v, want one unknown", effects)
	}
}

// A lost acknowledgement inside a 6 s window (1 s publish timeout: re-sent
// with the same id until first dispatch + 5 s), then the broker down for
// 8 s: the retries meet the unknown effect at their later leases, wait
// while the broker is down, and park it once the window has passed. It is
// never published again: a re-send after the broker is back would be a
// second copy the stream keeps. This is the check each later lease makes
// before publishing; a first lease skips it (no effect on record yet).
func TestNATSUnknownRetriedPastWindowIsParked(t *testing.T) {
	s, p, w := natsBehindProxy(t, 6*time.Second)
	p.Mute(true)
	_, id := w.post("ord-1", "s.example")
	testkit.WaitFor(t, 20*time.Second, func() bool { return byEffect(t, s)[id+":publish"] == 1 }, "the message in the stream")
	w.d.WaitLog("effect outcome unknown", 20*time.Second)
	p.Down(true)
	p.Mute(false)
	testkit.WaitFor(t, 30*time.Second, func() bool {
		d := w.entry(id)
		return d != nil && d.Status == touba.StatusParked
	}, "the entry parked")
	time.Sleep(8 * time.Second) // the broker down for 8 s, past the window
	p.Down(false)
	w.d.WaitLog("nats reconnected", 30*time.Second)
	d := w.entry(id)
	if d.Status != touba.StatusParked || d.ErrorCode != touba.EEffectReconciliationRequired ||
		!strings.Contains(d.ErrorMessage, id+":publish") {
		t.Fatalf("entry %s %s: %s", d.Status, d.ErrorCode, d.ErrorMessage)
	}
	w.stop()
	if n := byEffect(t, s)[id+":publish"]; n != 1 {
		t.Fatalf("the effect is %d times in the stream, want once", n)
	}
}

// The same lost acknowledgement with a 2 min window: the unknown publish
// is sent again with its id, the stream acknowledges a duplicate, and the
// effect is applied, in the stream once.
func TestNATSUnknownInsideWindowIsRepublished(t *testing.T) {
	s, p, w := natsBehindProxy(t, 2*time.Minute)
	p.Mute(true)
	_, id := w.post("ord-1", "s.example")
	testkit.WaitFor(t, 20*time.Second, func() bool { return byEffect(t, s)[id+":publish"] == 1 }, "the message in the stream")
	w.d.WaitLog("effect outcome unknown", 20*time.Second)
	p.Mute(false)
	p.Cut() // the muted connection is of no use: the client reconnects
	testkit.WaitFor(t, 30*time.Second, func() bool {
		d := w.entry(id)
		return d != nil && d.Status == touba.StatusDone
	}, "the entry done")
	w.stop()
	if n := byEffect(t, s)[id+":publish"]; n != 1 {
		t.Fatalf("the effect is %d times in the stream, want once", n)
	}
	if !strings.Contains(w.d.Log(), "nats acknowledged a duplicate") {
		t.Errorf("no duplicate acknowledgement logged")
	}
}

// A broker address in a forbidden range is refused EgressForbidden and
// never dialled: 127.0.0.0/8 denied by --egress-deny.
func TestNATSEgressForbidden(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	w := newDaemon(t, natsManifest("nats://"+l.Addr().String(), 1), "--egress-deny", "127.0.0.0/8")
	w.start()
	_, id := w.post("ord-1", "s.example")
	testkit.WaitFor(t, 30*time.Second, func() bool {
		d := w.entry(id)
		return d != nil && d.Status == touba.StatusFailed
	}, "the entry failed")
	d := w.entry(id)
	w.stop()
	if d.ErrorCode != touba.EEgressForbidden || accepted.Load() != 0 {
		t.Fatalf("entry %s %s (%s); %d connections reached the address", d.Status, d.ErrorCode, d.ErrorMessage, accepted.Load())
	}
}

// natsBehindProxy starts a stream ORDERS with the duplicate window given,
// a proxy in front of its server, and a daemon publishing through the
// proxy with a 1 s publish timeout, connected and its window read.
func natsBehindProxy(t *testing.T, window time.Duration) (*natstest.Server, *testkit.Proxy, *daemon) {
	t.Helper()
	s := natstest.Start(t)
	s.Stream("ORDERS", window, "orders.>")
	p := testkit.NewProxy(t, strings.TrimPrefix(s.URL(), "nats://"))
	w := newDaemon(t, natsManifest("nats://"+p.Addr(), 1))
	w.start()
	w.d.WaitLog("nats stream duplicate_window read", 30*time.Second)
	return s, p, w
}
