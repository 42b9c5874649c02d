package handler_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/handler/egress"
	"github.com/touba/touba-trigger/internal/natstest"
	"github.com/touba/touba-trigger/internal/testkit"
)

func newNATS(t *testing.T, spec handler.NATSSpec) handler.Runner {
	t.Helper()
	spec.Log = zerolog.Nop()
	r, err := handler.NewNATS(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func waitReady(t *testing.T, r handler.Runner) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, func() bool {
		_, known := r.(handler.DedupeWindower).DedupeWindow()
		return known
	}, "the stream's duplicate_window read")
}

// A publish carries the effect id as Nats-Msg-Id and in touba-effect-id,
// the event id and the trigger; the subject's placeholder is one token;
// the same effect published again is acknowledged as a duplicate (applied)
// and the stream holds it once; the window is the stream's.
func TestNATSPublish(t *testing.T) {
	s := natstest.Start(t)
	s.Stream("ORDERS", 2*time.Minute, "orders.>")
	r := newNATS(t, handler.NATSSpec{URL: s.URL(), Subject: "orders.{/shop}", Stream: "ORDERS", BodyRef: "/order"})
	waitReady(t, r)
	if w, _ := r.(handler.DedupeWindower).DedupeWindow(); w != 2*time.Minute {
		t.Fatalf("window %s, want 2m", w)
	}
	req := newRequest(t, `{"shop": "a.myshopify.com", "order": {"id": 7}}`, touba.RetryIdempotencyKey)
	for i := 0; i < 2; i++ {
		res := r.Call(context.Background(), req, func() error { return nil })
		if !res.OK || res.Outcome != touba.EffectApplied {
			t.Fatalf("call %d: %+v %v", i, res, res.Err)
		}
	}
	if got := r.(handler.BrokerStatser).BrokerStats().Duplicates.Load(); got != 1 {
		t.Errorf("duplicates %d, want 1", got)
	}
	msgs := s.Messages("ORDERS")
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want 1", len(msgs))
	}
	m := msgs[0]
	if m.Subject != "orders.a%2Emyshopify%2Ecom" || m.Data != `{"id":7}` || m.Header.Get("Nats-Msg-Id") != "q-1:create" ||
		m.Header.Get(handler.HeaderEffectID) != "q-1:create" || m.Header.Get(handler.HeaderEventID) != "ev-1" ||
		m.Header.Get(handler.HeaderTrigger) != "trigger:test/Orders" {
		t.Errorf("message %+v", m)
	}
}

// No stream for the subject: not_applied BrokerRejected. The broker down:
// not_applied, unsent.
func TestNATSRefusals(t *testing.T) {
	s := natstest.Start(t)
	s.Stream("ORDERS", time.Minute, "orders.>")
	r := newNATS(t, handler.NATSSpec{URL: s.URL(), Subject: "other.{/shop}", Stream: "ORDERS", Timeout: 2 * time.Second})
	waitReady(t, r)
	res := r.Call(context.Background(), newRequest(t, `{"shop": "x"}`, touba.RetryIdempotencyKey), func() error { return nil })
	if res.Outcome != touba.EffectNotApplied || res.Err == nil || res.Err.Code != touba.EBrokerRejected {
		t.Fatalf("no stream: %+v %v", res, res.Err)
	}
	s.Stop()
	testkit.WaitFor(t, 10*time.Second, func() bool { return !r.(interface{ Ready() bool }).Ready() }, "disconnected")
	sent := false
	res = r.Call(context.Background(), newRequest(t, `{"shop": "x"}`, touba.RetryIdempotencyKey), func() error { sent = true; return nil })
	if res.Outcome != touba.EffectNotApplied || sent {
		t.Fatalf("broker down: %+v %v sent=%v", res, res.Err, sent)
	}
}

// A broker address in a refused range is never dialled: EgressForbidden.
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
	g := &egress.Guard{Deny: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	r := newNATS(t, handler.NATSSpec{URL: "nats://" + l.Addr().String(), Subject: "orders.x", Stream: "ORDERS", Guard: g})
	var res *handler.Result
	testkit.WaitFor(t, 10*time.Second, func() bool {
		res = r.Call(context.Background(), newRequest(t, `{}`, touba.RetryIdempotencyKey), func() error { return nil })
		return res.Err != nil && res.Err.Code == touba.EEgressForbidden
	}, "EgressForbidden")
	if res.Outcome != touba.EffectNotApplied || accepted.Load() != 0 {
		t.Fatalf("%+v, %d connections accepted", res, accepted.Load())
	}
	r2 := newNATS(t, handler.NATSSpec{URL: "nats://169.254.169.254:4222", Subject: "orders.x", Stream: "ORDERS"})
	testkit.WaitFor(t, 10*time.Second, func() bool {
		res = r2.Call(context.Background(), newRequest(t, `{}`, touba.RetryIdempotencyKey), func() error { return nil })
		return res.Err != nil && res.Err.Code == touba.EEgressForbidden
	}, "EgressForbidden for the metadata address")
}

// The login comes from the binding's credentials: the right password
// publishes; a wrong one is refused, BrokerRejected, nothing sent.
func TestNATSLogin(t *testing.T) {
	s := natstest.StartWith(t, func(o *natsserver.Options) { o.Username, o.Password = "touba", "s3cret-pw" })
	s.Stream("ORDERS", time.Minute, "orders.>")
	r := newNATS(t, handler.NATSSpec{URL: s.URL(), Subject: "orders.x", Stream: "ORDERS", Username: "touba", Password: "s3cret-pw"})
	waitReady(t, r)
	if res := r.Call(context.Background(), newRequest(t, `{}`, touba.RetryIdempotencyKey), func() error { return nil }); res.Outcome != touba.EffectApplied {
		t.Fatalf("right password: %+v %v", res, res.Err)
	}
	bad := newNATS(t, handler.NATSSpec{URL: s.URL(), Subject: "orders.x", Stream: "ORDERS", Username: "touba", Password: "wrong"})
	var res *handler.Result
	sent := false
	testkit.WaitFor(t, 10*time.Second, func() bool {
		res = bad.Call(context.Background(), newRequest(t, `{}`, touba.RetryIdempotencyKey), func() error { sent = true; return nil })
		return res.Err != nil && res.Err.Code == touba.EBrokerRejected
	}, "BrokerRejected for a wrong password")
	if res.Outcome != touba.EffectNotApplied || sent || strings.Contains(res.Err.Message, "wrong") {
		t.Fatalf("%+v %v sent=%v", res, res.Err, sent)
	}
}

// tls://: the binding verifies the server with its CA and presents its
// client certificate, which the server requires.
func TestNATSMutualTLS(t *testing.T) {
	ca := newCA(t)
	srvCert, srvKey := ca.issue(t, "nats", true)
	cliCert, cliKey := ca.issue(t, "touba", false)
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	s := natstest.StartWith(t, func(o *natsserver.Options) {
		o.TLSConfig = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
			MinVersion: tls.VersionTLS12}
		o.TLS, o.TLSVerify = true, true
	})
	cpair, err := tls.X509KeyPair(cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	s.ClientOptions = []nats.Option{nats.Secure(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cpair}, MinVersion: tls.VersionTLS12})}
	s.Stream("ORDERS", time.Minute, "orders.>")
	url := strings.Replace(s.URL(), "nats://", "tls://", 1)
	r := newNATS(t, handler.NATSSpec{URL: url, Subject: "orders.x", Stream: "ORDERS", CA: ca.pem,
		ClientCert: string(cliCert), ClientKey: string(cliKey)})
	waitReady(t, r)
	if res := r.Call(context.Background(), newRequest(t, `{}`, touba.RetryIdempotencyKey), func() error { return nil }); res.Outcome != touba.EffectApplied {
		t.Fatalf("mutual TLS: %+v %v", res, res.Err)
	}
	if n := len(s.Messages("ORDERS")); n != 1 {
		t.Fatalf("%d messages", n)
	}
}
