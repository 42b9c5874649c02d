package handler_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync/atomic"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/handler/egress"
)

// listener is a real HTTP server on 127.0.0.1 that counts the connections
// it accepts and the requests it answers (200).
type listener struct {
	*httptest.Server
	conns, reqs atomic.Int32
	port        string
}

func newListener(t *testing.T) *listener {
	t.Helper()
	l := &listener{}
	l.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.reqs.Add(1)
	}))
	l.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			l.conns.Add(1)
		}
	}
	l.Start()
	t.Cleanup(l.Close)
	_, l.port, _ = net.SplitHostPort(l.Listener.Addr().String())
	return l
}

// noProxy keeps the environment's proxy out of the tests that dial.
func noProxy(*http.Request) (*url.URL, error) { return nil, nil }

// answers is a resolver whose answer changes: each lookup gets the next
// address (the last one again once they run out).
type answers struct {
	addrs []string
	n     atomic.Int32
}

func (a *answers) LookupNetIP(_ context.Context, _, _ string) ([]netip.Addr, error) {
	i := int(a.n.Add(1)) - 1
	return []netip.Addr{netip.MustParseAddr(a.addrs[min(i, len(a.addrs)-1)])}, nil
}

// egressCall calls an http binding at rawURL through guard and returns
// the result and whether the dispatched hook ran.
func egressCall(t *testing.T, rawURL string, guard *egress.Guard) (*handler.Result, int) {
	t.Helper()
	r := mustHTTP(t, rawURL, func(sp *handler.HTTPSpec) {
		sp.Outbound = handler.Outbound{Guard: guard, Proxy: noProxy}
	})
	var h hook
	return r.Call(context.Background(), newRequest(t, `{"id": "o-1"}`, touba.RetryIdempotencyKey), h.fn), h.n
}

// The egress guard refuses link-local (metadata), unspecified and
// multicast addresses, IPv4-mapped forms included, at dial time: the call
// is not_applied EgressForbidden after one try, and no listener sees a
// connection. 0.0.0.0 reaches a listener on 127.0.0.1 on Linux when
// dialled: the same URL with the range allowed shows that it would.
func TestEgressRefused(t *testing.T) {
	l := newListener(t)
	for _, host := range []string{"169.254.169.254", "[::ffff:169.254.169.254]", "0.0.0.0", "[::ffff:0.0.0.0]", "[::]",
		"224.0.0.1", "[ff02::1]", "255.255.255.255"} {
		res, hooked := egressCall(t, "http://"+host+":"+l.port+"/orders/{/id}", nil)
		check(t, res, touba.EffectNotApplied, touba.EEgressForbidden, nil, 0)
		if hooked != 1 || res.Detail != "" {
			t.Errorf("%s: hook %d detail %q", host, hooked, res.Detail)
		}
	}
	if n := l.conns.Load(); n != 0 {
		t.Fatalf("the listener accepted %d connections, want none", n)
	}
	// The webhook kind goes through the same guard.
	wres := mustWebhook(t, "http://169.254.169.254:"+l.port+"/hook", func(s *handler.WebhookSpec) {
		s.Outbound.Proxy = noProxy
	}).Call(context.Background(), newRequest(t, `{}`, touba.RetryNone), func() error { return nil })
	check(t, wres, touba.EffectNotApplied, touba.EEgressForbidden, nil, 0)

	// Allowed by the binding's allow_addresses, 0.0.0.0 reaches the
	// listener: what the guard kept from it above.
	res, _ := egressCall(t, "http://0.0.0.0:"+l.port+"/orders/{/id}", &egress.Guard{Allow: prefixes(t, "0.0.0.0/8")})
	if !res.OK || l.reqs.Load() != 1 {
		t.Fatalf("0.0.0.0 allowed: %+v (%v), the listener answered %d", res, res.Err, l.reqs.Load())
	}
}

// A name whose answer changes between two lookups cannot slip a refused
// address past the guard: the first try is dialled to the address its
// lookup gave (127.0.0.2, where nothing listens: refused, never sent,
// tried again), the second try's lookup gives the denied 127.0.0.1 and the
// call ends EgressForbidden. A guard that checked one lookup and dialled
// the name (a second lookup) would have reached the listener.
func TestEgressNameThatChangesItsAnswer(t *testing.T) {
	l := newListener(t)
	r := &answers{addrs: []string{"127.0.0.2", "127.0.0.1"}}
	res, _ := egressCall(t, "http://orders.test:"+l.port+"/orders/{/id}",
		&egress.Guard{Resolver: r, Deny: prefixes(t, "127.0.0.1/32")})
	check(t, res, touba.EffectNotApplied, touba.EEgressForbidden, nil, 0)
	if n := r.n.Load(); n != 2 {
		t.Errorf("%d lookups, want one per try (2)", n)
	}
	if n := l.conns.Load(); n != 0 {
		t.Fatalf("the listener accepted %d connections, want none", n)
	}
}

// --egress-deny refuses loopback; a binding's allow_addresses lets its own
// address through.
func TestEgressDenyAndAllow(t *testing.T) {
	l := newListener(t)
	url := "http://127.0.0.1:" + l.port + "/orders/{/id}"
	res, _ := egressCall(t, url, &egress.Guard{Deny: prefixes(t, "127.0.0.0/8")})
	check(t, res, touba.EffectNotApplied, touba.EEgressForbidden, nil, 0)
	if n := l.conns.Load(); n != 0 {
		t.Fatalf("denied: the listener accepted %d connections", n)
	}
	res, _ = egressCall(t, url, &egress.Guard{Deny: prefixes(t, "127.0.0.0/8"), Allow: prefixes(t, "127.0.0.1/32")})
	if !res.OK || l.reqs.Load() != 1 {
		t.Fatalf("allowed: %+v (%v), the listener answered %d", res, res.Err, l.reqs.Load())
	}
}

// With a proxy the guard checks the proxy's address (the one dialled) and
// the target, resolved here, before the proxy is used (issue 44: it used to
// leave the target's name to the proxy, which then reached the metadata
// address with the request's credentials).
func TestEgressThroughAProxy(t *testing.T) {
	var target atomic.Value
	proxy := newAPI(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		target.Store(r.Method + " " + r.URL.String())
		w.WriteHeader(http.StatusCreated)
	})
	proxyURL, _ := url.Parse(proxy.URL)
	call := func(guard *egress.Guard, lookups *answers) *handler.Result {
		guard.Resolver = lookups
		r := mustHTTP(t, "http://orders.test/orders/{/id}", func(sp *handler.HTTPSpec) {
			sp.Outbound = handler.Outbound{Guard: guard, Proxy: http.ProxyURL(proxyURL)}
		})
		return r.Call(context.Background(), newRequest(t, `{"id": "o 1"}`, touba.RetryNone), func() error { return nil })
	}
	public := &answers{addrs: []string{"93.184.216.34"}}
	res := call(&egress.Guard{Deny: prefixes(t, "127.0.0.0/8")}, public)
	check(t, res, touba.EffectNotApplied, touba.EEgressForbidden, nil, 0)
	metadata := &answers{addrs: []string{"169.254.169.254"}}
	res = call(&egress.Guard{}, metadata)
	check(t, res, touba.EffectNotApplied, touba.EEgressForbidden, nil, 0)
	if n := len(proxy.received()); n != 0 {
		t.Fatalf("the proxy received %d requests, want none", n)
	}
	res = call(&egress.Guard{}, public)
	if !res.OK || target.Load() != "PUT http://orders.test/orders/o%201" || public.n.Load() != 2 {
		t.Fatalf("through the proxy: %+v (%v), proxy saw %v, %d lookups of the target (want 2: the refused call's and this one's)",
			res, res.Err, target.Load(), public.n.Load())
	}
}

func prefixes(t *testing.T, s string) []netip.Prefix {
	t.Helper()
	p, err := egress.ParseList(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
