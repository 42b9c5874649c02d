package handler_test

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/handler/egress"
	"github.com/touba/touba-trigger/internal/rabbittest"
	"github.com/touba/touba-trigger/internal/testkit"
)

func newRabbit(t *testing.T, spec handler.RabbitMQSpec) handler.Runner {
	t.Helper()
	spec.Log = zerolog.Nop()
	r, err := handler.NewRabbitMQ(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func ready(t *testing.T, r handler.Runner) {
	t.Helper()
	testkit.WaitFor(t, 20*time.Second, func() bool { return r.(interface{ Ready() bool }).Ready() }, "connected")
}

func call(t *testing.T, r handler.Runner, input string) (*handler.Result, bool) {
	t.Helper()
	sent := false
	res := r.Call(context.Background(), newRequest(t, input, touba.RetryReconcile), func() error { sent = true; return nil })
	return res, sent
}

// One node for the publish cases (each has its own exchange):
//   - a publish is persistent, mandatory, its message_id and
//     touba-effect-id header the effect id, with the event id and the
//     trigger; the routing key's placeholder is one word; applied;
//   - no queue bound for the routing key: the mandatory message is
//     returned, not_applied BrokerRejected;
//   - no such exchange: the broker closes the channel, not_applied
//     BrokerRejected, and the next publish goes out on a new channel;
//   - a queue that refuses the message when full (x-overflow
//     reject-publish): the broker nacks it, not_applied BrokerRejected;
//   - a user without write permission on the exchange: access refused,
//     not_applied BrokerRejected; a wrong password: BrokerRejected, unsent;
//   - the broker killed: not_applied, unsent; back: published again.
func TestRabbitMQPublish(t *testing.T) {
	n := rabbittest.Start(t)
	n.Declare("orders", "topic", "orders.all", "orders.#")
	r := newRabbit(t, handler.RabbitMQSpec{URL: n.URL(), Exchange: "orders", RoutingKey: "orders.{/shop}", BodyRef: "/order"})
	ready(t, r)
	res, sent := call(t, r, `{"shop": "a.myshopify.com", "order": {"id": 7}}`)
	if !res.OK || res.Outcome != touba.EffectApplied || !sent || res.ReceiptRef != "rabbitmq:orders:orders.a%2Emyshopify%2Ecom" {
		t.Fatalf("publish: %+v %v", res, res.Err)
	}
	msgs := n.Messages("orders.all")
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want 1", len(msgs))
	}
	m := msgs[0]
	if m.RoutingKey != "orders.a%2Emyshopify%2Ecom" || m.Body != `{"id":7}` || m.MessageID != "q-1:create" ||
		m.Header(handler.HeaderEffectID) != "q-1:create" || m.Header(handler.HeaderEventID) != "ev-1" ||
		m.Header(handler.HeaderTrigger) != "trigger:test/Orders" || m.DeliveryMode != amqp.Persistent || m.ContentType != "application/json" {
		t.Errorf("message %+v", m)
	}

	t.Run("mandatory return", func(t *testing.T) {
		n.Declare("unbound", "direct", "", "")
		r := newRabbit(t, handler.RabbitMQSpec{URL: n.URL(), Exchange: "unbound", RoutingKey: "nobody"})
		ready(t, r)
		for range 2 { // the channel is reused after a return
			res, _ := call(t, r, `{}`)
			if res.Outcome != touba.EffectNotApplied || res.Err == nil || res.Err.Code != touba.EBrokerRejected ||
				!strings.Contains(res.Err.Message, "no queue is bound") {
				t.Fatalf("%+v %v", res, res.Err)
			}
		}
		if got := r.(handler.BrokerStatser).BrokerStats().Rejected.Load(); got != 2 {
			t.Errorf("rejected %d, want 2", got)
		}
	})

	t.Run("no such exchange", func(t *testing.T) {
		r := newRabbit(t, handler.RabbitMQSpec{URL: n.URL(), Exchange: "missing", RoutingKey: "k"})
		ready(t, r)
		for range 2 {
			res, _ := call(t, r, `{}`)
			if res.Outcome != touba.EffectNotApplied || res.Err == nil || res.Err.Code != touba.EBrokerRejected ||
				!strings.Contains(res.Err.Message, "404") {
				t.Fatalf("%+v %v", res, res.Err)
			}
		}
	})

	t.Run("nack", func(t *testing.T) {
		n.Declare("full", "direct", "", "")
		err := func() error {
			ch, err := n.Conn().Channel()
			if err != nil {
				return err
			}
			if _, err := ch.QueueDeclare("full.q", true, false, false, false,
				amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"}); err != nil {
				return err
			}
			return ch.QueueBind("full.q", "k", "full", false, nil)
		}()
		if err != nil {
			t.Fatal(err)
		}
		r := newRabbit(t, handler.RabbitMQSpec{URL: n.URL(), Exchange: "full", RoutingKey: "k"})
		ready(t, r)
		if res, _ := call(t, r, `{}`); res.Outcome != touba.EffectApplied {
			t.Fatalf("first: %+v %v", res, res.Err)
		}
		res, _ := call(t, r, `{}`)
		if res.Outcome != touba.EffectNotApplied || res.Err == nil || res.Err.Code != touba.EBrokerRejected || !strings.Contains(res.Err.Message, "nack") {
			t.Fatalf("second: %+v %v", res, res.Err)
		}
	})

	t.Run("access refused and login refused", func(t *testing.T) {
		n.Ctl("add_user", "reader", "reader-pw")
		n.Ctl("set_permissions", "-p", "/", "reader", "", "", ".*") // read only
		r := newRabbit(t, handler.RabbitMQSpec{URL: n.URL(), Exchange: "orders", RoutingKey: "orders.x",
			Username: "reader", Password: "reader-pw"})
		ready(t, r)
		res, _ := call(t, r, `{}`)
		if res.Outcome != touba.EffectNotApplied || res.Err == nil || res.Err.Code != touba.EBrokerRejected ||
			!strings.Contains(res.Err.Message, "ACCESS_REFUSED") {
			t.Fatalf("read-only user: %+v %v", res, res.Err)
		}
		bad := newRabbit(t, handler.RabbitMQSpec{URL: n.URL(), Exchange: "orders", RoutingKey: "orders.x",
			Username: "reader", Password: "wrong-pw"})
		var sent bool
		testkit.WaitFor(t, 10*time.Second, func() bool {
			res, sent = call(t, bad, `{}`)
			return res.Err != nil && res.Err.Code == touba.EBrokerRejected
		}, "BrokerRejected for a wrong password")
		if res.Outcome != touba.EffectNotApplied || sent || strings.Contains(res.Err.Message, "wrong-pw") {
			t.Fatalf("wrong password: %+v %v sent=%v", res, res.Err, sent)
		}
	})

	t.Run("broker down", func(t *testing.T) {
		n.Kill()
		testkit.WaitFor(t, 20*time.Second, func() bool { return !r.(interface{ Ready() bool }).Ready() }, "disconnected")
		res, sent := call(t, r, `{"shop": "b", "order": {}}`)
		if res.Outcome != touba.EffectNotApplied || sent {
			t.Fatalf("broker down: %+v %v sent=%v", res, res.Err, sent)
		}
		n.Restart()
		ready(t, r)
		if res, _ := call(t, r, `{"shop": "b", "order": {}}`); res.Outcome != touba.EffectApplied {
			t.Fatalf("after the restart: %+v %v", res, res.Err)
		}
		if got := n.Count("orders.all"); got != 2 {
			t.Fatalf("%d messages in orders.all, want 2 (the one confirmed before the kill, and the new)", got)
		}
	})
}

// A broker address in a refused range is never dialled: EgressForbidden.
func TestRabbitMQEgressForbidden(t *testing.T) {
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
	g := &egress.Guard{Deny: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	r := newRabbit(t, handler.RabbitMQSpec{URL: "amqp://" + l.Addr().String() + "/", Exchange: "orders", RoutingKey: "k", Guard: g})
	var res *handler.Result
	var sent bool
	testkit.WaitFor(t, 10*time.Second, func() bool {
		res, sent = call(t, r, `{}`)
		return res.Err != nil && res.Err.Code == touba.EEgressForbidden
	}, "EgressForbidden")
	if res.Outcome != touba.EffectNotApplied || sent || accepted.Load() != 0 {
		t.Fatalf("%+v, sent=%v, %d connections accepted", res, sent, accepted.Load())
	}
	r2 := newRabbit(t, handler.RabbitMQSpec{URL: "amqp://169.254.169.254:5672/", Exchange: "orders", RoutingKey: "k"})
	testkit.WaitFor(t, 10*time.Second, func() bool {
		res, _ = call(t, r2, `{}`)
		return res.Err != nil && res.Err.Code == touba.EEgressForbidden
	}, "EgressForbidden for the metadata address")
}

// amqps://: the binding verifies the broker with its CA and presents its
// client certificate, which the broker requires; the login is the
// binding's username and password.
func TestRabbitMQMutualTLS(t *testing.T) {
	ca := newCA(t)
	srvCert, srvKey := ca.issue(t, "rabbitmq", true)
	cliCert, cliKey := ca.issue(t, "touba", false)
	n := rabbittest.StartWith(t, rabbittest.Options{CertPEM: srvCert, KeyPEM: srvKey, CAPEM: ca.pem})
	n.Declare("orders", "direct", "orders.q", "k")
	url := "amqps://127.0.0.1:" + strconv.Itoa(n.TLSPort) + "/"
	r := newRabbit(t, handler.RabbitMQSpec{URL: url, Exchange: "orders", RoutingKey: "k", Username: "guest", Password: "guest",
		CA: ca.pem, ClientCert: string(cliCert), ClientKey: string(cliKey)})
	ready(t, r)
	if res, _ := call(t, r, `{}`); res.Outcome != touba.EffectApplied {
		t.Fatalf("mutual TLS: %+v %v", res, res.Err)
	}
	if got := n.Count("orders.q"); got != 1 {
		t.Fatalf("%d messages", got)
	}
	// Without the client certificate the broker refuses the handshake:
	// nothing is sent.
	r2 := newRabbit(t, handler.RabbitMQSpec{URL: url, Exchange: "orders", RoutingKey: "k", CA: ca.pem})
	res, sent := call(t, r2, `{}`)
	if res.Outcome != touba.EffectNotApplied || sent {
		t.Fatalf("without a client certificate: %+v %v sent=%v", res, res.Err, sent)
	}
}
