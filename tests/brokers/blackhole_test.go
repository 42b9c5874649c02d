package brokers_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// TestNATSBehindABlackHole: the daemon's connection to the broker is
// black-holed (nothing forwarded either way, no reset, the socket stays
// open), and so is every connection opened while the hole lasts, 4 s; then
// new connections go through again while the first stays silent. The
// client must find the dead connection by itself, from its own pings, and
// connect again; publishes lost in the hole are unknown and published again
// under their id inside the stream's 2 min window. Every delivery ends
// done, in the stream once, well before nats.go's default pings (2 min, two
// outstanding) would have noticed.
func TestNATSBehindABlackHole(t *testing.T) {
	s, p, w := natsBehindProxy(t, 2*time.Minute)
	p.HoleNew(true)
	if n := p.Hole(); n == 0 {
		t.Fatal("no broker connection to black-hole")
	}
	hole := time.Now()
	var ids []string
	for i := range 5 {
		status, id := w.post(fmt.Sprintf("bh-%d", i), "s.example")
		if status != http.StatusAccepted {
			t.Fatalf("post: %d", status)
		}
		ids = append(ids, id)
	}
	w.d.WaitLog("nats publish failed", 20*time.Second)
	time.Sleep(time.Until(hole.Add(4 * time.Second))) // the hole lasts 4 s
	p.HoleNew(false)
	testkit.WaitFor(t, 60*time.Second, func() bool {
		for _, id := range ids {
			if d := w.entry(id); d == nil || d.Status != touba.StatusDone {
				return false
			}
		}
		return true
	}, "every delivery done after the black hole")
	t.Logf("done %s after the hole opened", time.Since(hole).Round(time.Millisecond))
	if !strings.Contains(w.d.Log(), "nats reconnected") {
		t.Errorf("the daemon did not log its reconnection")
	}
	w.stop()
	onceEach(t, s, ids)
}

// TestRabbitMQBehindABlackHole: the same black hole in front of RabbitMQ,
// 4 s, under retry_mode reconcile. RabbitMQ has no dedupe window: a
// publish lost in the hole may have reached the broker for all the daemon
// knows, so it is parked, never sent again; a call that found no channel
// sent nothing and is retried. The daemon finds the dead connection by
// itself (heartbeats) and connects again: a delivery posted after the hole
// is done, and no message is in the queue twice.
func TestRabbitMQBehindABlackHole(t *testing.T) {
	n := newRabbit(t)
	p := testkit.NewProxy(t, n.Addr())
	w := newDaemon(t, rabbitManifest("amqp://"+p.Addr()+"/", 1, "reconcile"))
	w.start()
	w.d.WaitLog("rabbitmq connected", 30*time.Second)
	_, first := w.post("bh-first", "s.example")
	testkit.WaitFor(t, 30*time.Second, func() bool {
		d := w.entry(first)
		return d != nil && d.Status == touba.StatusDone
	}, "the first entry done")
	p.HoleNew(true)
	if p.Hole() == 0 {
		t.Fatal("no broker connection to black-hole")
	}
	hole := time.Now()
	ids := []string{first}
	for i := range 3 {
		_, id := w.post(fmt.Sprintf("bh-%d", i), "s.example")
		ids = append(ids, id)
	}
	time.Sleep(time.Until(hole.Add(4 * time.Second))) // the hole lasts 4 s
	p.HoleNew(false)
	w.d.WaitLog("rabbitmq reconnected", 90*time.Second)
	_, last := w.post("bh-last", "s.example")
	ids = append(ids, last)
	ended := func(id string) bool {
		d := w.entry(id)
		return d != nil && (d.Status == touba.StatusDone || d.Status == touba.StatusParked)
	}
	testkit.WaitFor(t, 60*time.Second, func() bool {
		for _, id := range ids {
			if !ended(id) {
				return false
			}
		}
		return true
	}, "every delivery done or parked")
	t.Logf("reconnected and drained %s after the hole opened", time.Since(hole).Round(time.Millisecond))
	got := byMessageID(t, n)
	for _, id := range ids {
		d := w.entry(id)
		switch c := got[id+":publish"]; {
		case c > 1:
			t.Errorf("effect %s:publish is %d times in the queue", id, c)
		case d.Status == touba.StatusDone && c != 1:
			t.Errorf("entry %s done, its message %d times in the queue", id, c)
		case d.Status == touba.StatusParked && d.ErrorCode != touba.EEffectReconciliationRequired:
			t.Errorf("entry %s parked %s: %s", id, d.ErrorCode, d.ErrorMessage)
		}
	}
	if d := w.entry(last); d.Status != touba.StatusDone {
		t.Errorf("the delivery after the hole is %s %s", d.Status, d.ErrorCode)
	}
	w.stop()
}
