// Package forwarded reads what the proxies named by --trusted-proxies
// forward about a request: the client's address (X-Forwarded-For) and
// whether the client spoke HTTPS to them (X-Forwarded-Proto). A request
// whose TCP peer is not a trusted proxy is taken as it arrived: its
// headers may be forged by anyone.
package forwarded

import (
	"net/http"
	"net/netip"
	"strings"
)

// ClientAddr is the address a request comes from: the TCP peer's or, when
// the peer is a trusted proxy, the right-most X-Forwarded-For address that
// is not itself a trusted proxy. An address that cannot be read is the
// zero Addr, which no allow list holds.
func ClientAddr(r *http.Request, trusted []netip.Prefix) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	peer := ap.Addr().Unmap()
	if !InAny(trusted, peer) {
		return peer
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	// From the right: each hop was appended by the proxy after it, and
	// only hops appended by trusted proxies can be believed.
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			return netip.Addr{} // a forged or broken hop: nothing to trust
		}
		a = a.Unmap()
		if !InAny(trusted, a) {
			return a
		}
		peer = a // a trusted proxy all the way: the farthest one seen
	}
	return peer
}

// HTTPS reports whether the client reached us over TLS: the daemon
// terminated it itself, or the TCP peer is a trusted proxy whose
// X-Forwarded-Proto says https. Of a list ("https, http", each proxy
// appending its own), the left-most value is the one the client-facing
// proxy saw.
func HTTPS(r *http.Request, trusted []netip.Prefix) bool {
	if r.TLS != nil {
		return true
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil || !InAny(trusted, ap.Addr().Unmap()) {
		return false
	}
	v := r.Header.Get("X-Forwarded-Proto")
	first, _, _ := strings.Cut(v, ",")
	return strings.EqualFold(strings.TrimSpace(first), "https")
}

// InAny reports whether a is valid and in one of list's prefixes.
func InAny(list []netip.Prefix, a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	for _, p := range list {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
