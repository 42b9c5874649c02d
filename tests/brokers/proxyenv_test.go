package brokers_test

import (
	"net"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// The broker kinds dial their brokers themselves, through the egress
// guard, and never through an HTTP proxy: with HTTPS_PROXY (and every
// other proxy variable) pointing at a proxy the guard would let through, a
// broker address in a forbidden range (127.0.0.2, denied by
// --egress-deny) is still refused EgressForbidden, and neither the broker
// address nor the proxy sees a connection.
func TestBrokerDialIgnoresTheProxy(t *testing.T) {
	if l, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		t.Skipf("cannot listen on 127.0.0.2 here: %v", err)
	} else {
		l.Close()
	}
	for _, kind := range []struct {
		name     string
		manifest func(addr string) string
	}{
		{"nats", func(addr string) string { return natsManifest("nats://"+addr, 1) }},
		{"kafka", func(addr string) string { return kafkaManifest(addr, "reconcile", "") }},
		{"rabbitmq", func(addr string) string { return rabbitManifest("amqp://"+addr+"/", 1, "reconcile") }},
	} {
		t.Run(kind.name, func(t *testing.T) {
			broker, brokerConns := listenCounting(t, "127.0.0.2:0")
			proxy, proxyConns := listenCounting(t, "127.0.0.1:0")
			w := newDaemon(t, kind.manifest(broker), "--egress-deny", "127.0.0.2/32")
			for _, v := range []string{"HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"} {
				w.env = append(w.env, v+"=http://"+proxy)
			}
			w.env = append(w.env, "NO_PROXY=", "no_proxy=")
			w.start()
			_, id := w.post("ord-1", "s.example")
			testkit.WaitFor(t, 30*time.Second, func() bool {
				d := w.entry(id)
				return d != nil && d.Status == touba.StatusFailed
			}, "the entry failed")
			d := w.entry(id)
			w.stop()
			if d.ErrorCode != touba.EEgressForbidden {
				t.Errorf("entry %s %s: %s", d.Status, d.ErrorCode, d.ErrorMessage)
			}
			if n, m := brokerConns.Load(), proxyConns.Load(); n != 0 || m != 0 {
				t.Errorf("%d connections reached the broker address, %d the proxy", n, m)
			}
			t.Logf("%s", d.ErrorMessage)
		})
	}
}
