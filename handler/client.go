package handler

import (
	"crypto/tls"
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
	// tests only.
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
	// proxy's, and the proxy resolves the target.
	t.DialContext = g.DialContext
	t.DialTLSContext = nil
	t.Proxy = http.ProxyFromEnvironment
	if o.Proxy != nil {
		t.Proxy = o.Proxy
	}
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
