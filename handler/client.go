package handler

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"

	"github.com/touba/touba-trigger/handler/egress"
)

// Outbound is what every call of an HTTP kind goes through: the egress
// guard on the dialer, the proxy, TLS. A zero Outbound is the default: the
// default refused ranges, the system resolver, HTTPS_PROXY/NO_PROXY from
// the environment, the system's roots.
type Outbound struct {
	// Guard checks each address dialled (the proxy's, when one is used);
	// nil is a Guard with no allow and no deny list.
	Guard *egress.Guard
	// Proxy picks a request's proxy; nil is http.ProxyFromEnvironment.
	Proxy func(*http.Request) (*url.URL, error)
	// TLS is the client's TLS configuration (roots, client certificate);
	// nil is the default.
	TLS *tls.Config
	// Client, when set, sends the requests as it is, without the guard: for
	// tests only. Its transport must report httptrace's GotConn, as
	// net/http's does: an error before it counts as never sent.
	Client *http.Client
}

// client returns the *http.Client of o and whether it is the runner's own
// (closed with it).
func (o Outbound) client() (*http.Client, bool) {
	if o.Client != nil {
		return o.Client, false
	}
	g := o.Guard
	if g == nil {
		g = &egress.Guard{}
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	// The guard resolves and dials: the address checked is the address
	// dialled (SPEC §2.2). With a proxy, the address dialled is the
	// proxy's (checked as any), and the proxy connects to the target:
	// guardedProxy checks the target first.
	t.DialContext = g.DialContext
	t.DialTLSContext = nil
	proxy := http.ProxyFromEnvironment
	if o.Proxy != nil {
		proxy = o.Proxy
	}
	t.Proxy = guardedProxy(g, proxy)
	t.OnProxyConnectResponse = proxyConnectRefused
	if o.TLS != nil {
		t.TLSClientConfig = o.TLS.Clone()
	}
	return &http.Client{
		Transport: t,
		// A redirect is an answer, not an instruction: following it would
		// send the request, its credentials included, where the manifest
		// does not say.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, true
}

// guardedProxy is proxy, but a request whose target the guard refuses gets
// no proxy: it fails with the guard's *ForbiddenError before anything is
// sent, to the proxy or anywhere, so a refused target, and the credentials
// in the request's headers, never reach a proxy (SPEC §2.2). The target is
// checked as the dialer checks an address: a literal address as it is, a
// name by every address it resolves to here. (The proxy resolves the name
// again, on its side: a name that changes its answer in between is the
// proxy's to guard.) Requests that go direct (NO_PROXY) are left to the
// dialer.
func guardedProxy(g *egress.Guard, proxy func(*http.Request) (*url.URL, error)) func(*http.Request) (*url.URL, error) {
	return func(req *http.Request) (*url.URL, error) {
		u, err := proxy(req)
		if err != nil || u == nil {
			return u, err
		}
		if err := g.CheckHost(req.Context(), "tcp", req.URL.Hostname()); err != nil {
			return nil, err
		}
		return u, nil
	}
}

// proxyRefusedError is a proxy's answer other than 200 to the CONNECT of
// an https request: the request never left for its target.
type proxyRefusedError struct {
	Proxy  string // the proxy's address, without credentials
	Status string
}

// Error names the proxy and its answer.
func (e *proxyRefusedError) Error() string {
	return fmt.Sprintf("proxy %s refused the CONNECT: %s", e.Proxy, e.Status)
}

// proxyConnectRefused gives a refused CONNECT a type of its own (the
// transport's own error is a bare errors.New of the status text).
func proxyConnectRefused(_ context.Context, proxy *url.URL, _ *http.Request, resp *http.Response) error {
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	return &proxyRefusedError{Proxy: proxy.Host, Status: resp.Status}
}
