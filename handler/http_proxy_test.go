package handler_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"log"
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

// rawProxy is a TCP listener on loopback standing for a proxy: it counts
// the connections it accepts and the bytes it receives, and answers each
// connection with answer (nil: close it at once).
type rawProxy struct {
	ln           net.Listener
	conns, bytes atomic.Int32
	url          *url.URL
}

func newRawProxy(t *testing.T, answer func(c net.Conn, r *bufio.Reader)) *rawProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &rawProxy{ln: ln, url: &url.URL{Scheme: "http", Host: ln.Addr().String()}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.conns.Add(1)
			go func() {
				defer c.Close()
				r := bufio.NewReader(countingReader{c, &p.bytes})
				if answer != nil {
					answer(c, r)
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return p
}

type countingReader struct {
	r io.Reader
	n *atomic.Int32
}

func (c countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int32(n))
	return n, err
}

// refuseConnect answers a CONNECT (or any request) 403.
func refuseConnect(c net.Conn, r *bufio.Reader) {
	if _, err := http.ReadRequest(r); err == nil {
		io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
	}
}

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// callThrough calls rawURL with an http binding (kind "http") or a webhook
// (kind "webhook") whose requests go to proxy, under retryMode, with at
// most tries tries.
func callThrough(t *testing.T, kind, rawURL string, proxy *url.URL, guard *egress.Guard, retryMode string, tries int) *handler.Result {
	t.Helper()
	ob := handler.Outbound{Guard: guard, Proxy: http.ProxyURL(proxy)}
	var r handler.Runner
	if kind == "http" {
		r = mustHTTP(t, rawURL, func(sp *handler.HTTPSpec) { sp.Outbound, sp.MaxTries = ob, tries })
	} else {
		r = mustWebhook(t, rawURL, func(sp *handler.WebhookSpec) { sp.Outbound, sp.MaxTries = ob, tries })
	}
	return r.Call(context.Background(), newRequest(t, `{"id": "o-1"}`, retryMode), func() error { return nil })
}

// Issue 44: with a proxy, a refused target (a literal address, or a name
// that resolves here to a refused address) is refused before the proxy is
// used: the proxy receives nothing, no connection and no byte, so neither
// the request nor its Authorization header reaches it; the call is
// not_applied EgressForbidden. Both HTTP kinds, plain and https targets
// (the CONNECT path).
func TestEgressProxyGetsNothingForARefusedTarget(t *testing.T) {
	proxy := newRawProxy(t, func(c net.Conn, r *bufio.Reader) {
		if _, err := http.ReadRequest(r); err == nil {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		}
	})
	resolver := fixedResolver{"metadata.test": {"169.254.169.254"}, "mixed.test": {"93.184.216.34", "169.254.169.254"},
		"loop.test": {"127.0.0.2"}}
	for _, target := range []struct {
		url   string
		guard *egress.Guard
	}{
		{"http://169.254.169.254/latest/meta-data/", &egress.Guard{}},
		{"https://169.254.169.254/latest/meta-data/", &egress.Guard{}},
		{"http://[::ffff:169.254.169.254]/latest/", &egress.Guard{}},
		{"http://[::169.254.169.254]/latest/", &egress.Guard{}},
		{"http://100.64.0.1/x", &egress.Guard{}},
		{"http://metadata.test/latest/meta-data/", &egress.Guard{Resolver: resolver}},
		{"https://metadata.test/latest/meta-data/", &egress.Guard{Resolver: resolver}},
		{"http://mixed.test/x", &egress.Guard{Resolver: resolver}},
		// Denied daemon-wide, by name; the proxy (on 127.0.0.1) is not.
		{"http://loop.test/x", &egress.Guard{Resolver: resolver, Deny: prefixes(t, "127.0.0.2/32")}},
	} {
		for _, kind := range []string{"http", "webhook"} {
			res := callThrough(t, kind, target.url, proxy.url, target.guard, touba.RetryIdempotencyKey, 3)
			if res.Outcome != touba.EffectNotApplied || errCode(res) != touba.EEgressForbidden {
				t.Errorf("%s %s: %s %s (%v), want not_applied EgressForbidden", kind, target.url, res.Outcome, errCode(res), res.Err)
			}
		}
	}
	if c, b := proxy.conns.Load(), proxy.bytes.Load(); c != 0 || b != 0 {
		t.Fatalf("the proxy accepted %d connections and received %d bytes, want none", c, b)
	}
	// An allowed target goes through the proxy, the proxy's address
	// dialled as usual.
	res := callThrough(t, "http", "http://orders.test/o", proxy.url,
		&egress.Guard{Resolver: fixedResolver{"orders.test": {"93.184.216.34"}}}, touba.RetryNone, 1)
	if !res.OK || proxy.conns.Load() != 1 {
		t.Fatalf("an allowed target: %+v (%v), the proxy accepted %d connections", res, res.Err, proxy.conns.Load())
	}
}

// Issue 44: a proxy that refuses the connection, closes it unanswered, or
// refuses the CONNECT never let the request leave: not_applied, whatever
// the retry mode (here none, where an unknown outcome would be parked).
// Go reports the first as "proxyconnect", not "dial", and the last as a
// bare error of the status text.
func TestEgressProxyRefusalIsNotApplied(t *testing.T) {
	closed := &url.URL{Scheme: "http", Host: closedAddr(t)}
	hangUp := newRawProxy(t, nil)
	refuses := newRawProxy(t, refuseConnect)
	guard := func() *egress.Guard { return &egress.Guard{Resolver: fixedResolver{"orders.test": {"93.184.216.34"}}} }
	for _, tc := range []struct {
		name, url string
		proxy     *url.URL
	}{
		{"connection refused", "http://orders.test/o", closed},
		{"connection refused (https)", "https://orders.test/o", closed},
		{"closed before the CONNECT's answer", "https://orders.test/o", hangUp.url},
		{"CONNECT refused", "https://orders.test/o", refuses.url},
	} {
		for _, kind := range []string{"http", "webhook"} {
			res := callThrough(t, kind, tc.url, tc.proxy, guard(), touba.RetryNone, 1)
			if res.Outcome != touba.EffectNotApplied || errCode(res) != touba.EHandlerFailed {
				t.Errorf("%s, %s: %s %s (%v), want not_applied HandlerFailed", tc.name, kind, res.Outcome, errCode(res), res.Err)
			}
		}
	}
	// A refused CONNECT is tried again within the call: it never left.
	if res := callThrough(t, "http", "https://orders.test/o", refuses.url, guard(), touba.RetryNone, 3); res.Outcome != touba.EffectNotApplied {
		t.Fatalf("CONNECT refused, 3 tries: %s (%v)", res.Outcome, res.Err)
	}
	if n := refuses.conns.Load(); n != 2+3 {
		t.Fatalf("the refusing proxy saw %d connections, want one per try (5)", n)
	}
}

// Issue 44: a server that refuses the TLS handshake (here: it requires a
// client certificate the binding does not have) never saw the request:
// under TLS 1.2 the refusal ends the handshake, before any request byte is
// written, and the call is not_applied. Under TLS 1.3 the client's side
// of the handshake is over before the server looks at the certificate,
// the request is written, and the refusal comes as the answer's first
// read: the server's side never completed, so no application read it,
// and the call is not_applied too (SPEC §2.2).
func TestHTTPTLSHandshakeRefused(t *testing.T) {
	ca := newCA(t)
	serverCert, serverKey := ca.issue(t, "orders.test", true)
	pair, err := tls.X509KeyPair(serverCert, serverKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		version uint16
		outcome string
	}{
		{tls.VersionTLS12, touba.EffectNotApplied},
		{tls.VersionTLS13, touba.EffectNotApplied},
	} {
		var ran atomic.Int32
		s := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran.Add(1) }))
		s.Config.ErrorLog = log.New(io.Discard, "", 0)
		s.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAnyClientCert,
			MinVersion: tc.version, MaxVersion: tc.version}
		s.StartTLS()
		r := mustHTTP(t, s.URL+"/orders/{/id}", func(sp *handler.HTTPSpec) {
			sp.CA, sp.MaxTries, sp.Outbound.Proxy = ca.pem, 1, noProxy
		})
		res := r.Call(context.Background(), newRequest(t, `{"id": "o-1"}`, touba.RetryReconcile), func() error { return nil })
		s.Close()
		if res.Outcome != tc.outcome || ran.Load() != 0 {
			t.Errorf("TLS %x: %s (%v), the server ran %d requests; want %s and none", tc.version, res.Outcome, res.Err, ran.Load(), tc.outcome)
		}
	}
}

// Issue 44: a secret holding "%%" is sent as it is; only the format's own
// "%%" is a percent sign.
func TestHTTPSecretWithPercentSigns(t *testing.T) {
	s := newAPI(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	for _, tc := range []struct{ secret, format, want string }{
		{"ab%%cd%s", "Bearer %s", "Bearer ab%%cd%s"},
		{"ab%%cd", "Token 100%% %s", "Token 100% ab%%cd"},
		{"%%", "", "%%"},
	} {
		r := mustHTTP(t, s.URL+"/o", func(sp *handler.HTTPSpec) {
			sp.Headers = []handler.Header{{Name: "Authorization", Secret: "ORDERS_TOKEN", Format: tc.format}}
			sp.Secrets = map[string]string{"ORDERS_TOKEN": tc.secret}
		})
		if res := r.Call(context.Background(), newRequest(t, `{}`, touba.RetryNone), func() error { return nil }); !res.OK {
			t.Fatalf("%q: %+v (%v)", tc.secret, res, res.Err)
		}
		got := s.received()
		if h := got[len(got)-1].header.Get("Authorization"); h != tc.want {
			t.Errorf("secret %q, format %q: sent %q, want %q", tc.secret, tc.format, h, tc.want)
		}
	}
}

// fixedResolver answers names from a map; any other name is not found.
type fixedResolver map[string][]string

func (r fixedResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range r[host] {
		out = append(out, netip.MustParseAddr(a))
	}
	if out == nil {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}
