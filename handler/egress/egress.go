// Package egress guards where the HTTP handler kinds (webhook, http) may
// connect (SPEC §2.2, the egress guard). The guard sits in the dialer: it
// resolves the name itself, checks every address the answer holds, and
// dials the checked address, never the name, so a name whose answer
// changes between two lookups cannot slip a refused address past it. The
// socket's own connect target is checked once more (net.Dialer.Control).
//
// Refused unless a binding's allow list names them: link-local addresses
// (cloud metadata services live there), the unspecified address, multicast,
// broadcast and reserved ranges, in IPv4, IPv6 and IPv4-mapped IPv6 form,
// plus whatever the operator denies daemon-wide (--egress-deny). An IPv6
// address that embeds an IPv4 address (IPv4-compatible, 6to4, NAT64) is
// checked as that IPv4 address too (embed.go). Loopback
// and private ranges are allowed unless denied: users call local services.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
)

// Range is a refused range and why it is refused, as messages name it.
type Range struct {
	Prefix netip.Prefix
	Why    string
}

// Refused are the ranges refused by default (SPEC §2.2), most specific
// first so that a message names the narrowest reason.
var Refused = []Range{
	{netip.MustParsePrefix("169.254.169.254/32"), "cloud metadata (link-local)"},
	{netip.MustParsePrefix("169.254.170.2/32"), "cloud metadata (link-local)"},
	{netip.MustParsePrefix("100.100.100.200/32"), "cloud metadata"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud metadata"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified (this host)"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("100.64.0.0/10"), "reserved (shared address space, carrier-grade NAT)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved (IETF protocol assignments)"},
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved (benchmarking)"},
	{netip.MustParsePrefix("fec0::/10"), "reserved (site-local)"},
	{netip.MustParsePrefix("2001:2::/48"), "reserved (benchmarking)"},
	{netip.MustParsePrefix("2001::/23"), "reserved (IETF protocol assignments)"},
}

// Resolver finds the addresses of a name; *net.Resolver is one. Tests
// inject their own.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Guard checks and dials outbound connections. Its zero value refuses the
// default ranges and resolves with net.DefaultResolver.
type Guard struct {
	// Allow lists ranges allowed even when refused by default or by Deny:
	// a binding's options.allow_addresses.
	Allow []netip.Prefix
	// Deny adds refused ranges (--egress-deny, daemon-wide).
	Deny []netip.Prefix
	// Resolver finds the addresses of a name; nil is net.DefaultResolver.
	Resolver Resolver
}

// ForbiddenError is a connection the guard refused: nothing was sent.
type ForbiddenError struct {
	Host string     // the name or address asked for
	Addr netip.Addr // the refused address
	Why  string     // the range's reason, or "denied by --egress-deny"
}

// Error names the address, why it is refused, and how to allow it.
func (e *ForbiddenError) Error() string {
	at := e.Addr.String()
	if e.Host != "" && e.Host != at {
		at = e.Host + " (" + at + ")"
	}
	return fmt.Sprintf("egress to %s refused: %s; a binding's options.allow_addresses can allow it", at, e.Why)
}

// Check returns nil when a connection to a is allowed, else a
// *ForbiddenError naming host (which may be empty).
func (g *Guard) Check(host string, a netip.Addr) error {
	a = a.WithZone("")
	if g.allowed(a) {
		return nil
	}
	if why := g.refused(a.Unmap()); why != "" {
		return &ForbiddenError{Host: host, Addr: a, Why: why}
	}
	// An address that embeds an IPv4 address reaches that address too
	// (through a NAT64, a 6to4 relay, or the host's own IPv4 stack): it is
	// checked as it.
	for _, e := range embedded(a.Unmap()) {
		if g.allowed(e.v4) {
			continue
		}
		if why := g.refused(e.v4); why != "" {
			return &ForbiddenError{Host: host, Addr: a, Why: why + " through " + e.form + " (" + e.v4.String() + ")"}
		}
	}
	return nil
}

func (g *Guard) allowed(a netip.Addr) bool {
	for _, p := range g.Allow {
		if p.Contains(a) || p.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// refused is why a (unmapped) is refused, or "".
func (g *Guard) refused(a netip.Addr) string {
	for _, r := range Refused {
		if r.Prefix.Contains(a) {
			return r.Why
		}
	}
	for _, p := range g.Deny {
		if p.Contains(a) {
			return "denied by --egress-deny " + p.String()
		}
	}
	return ""
}

// DialContext connects to address (host:port) over network (tcp, tcp4 or
// tcp6) as net.Dialer does, after checking every address host resolves
// to: if any is refused, nothing is dialled and the error is a
// *ForbiddenError. The addresses dialled are the addresses checked, in the
// resolver's order, until one connects.
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	addrs, err := g.resolve(ctx, network, host)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if err := g.Check(host, a); err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
	}
	// The caller's context bounds the connect (the try's timeout).
	d := net.Dialer{Control: g.control(host)}
	var errs []error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// CheckHost resolves host (an address is itself) and checks every address
// of the answer: nil when all are allowed, else a *ForbiddenError, or the
// lookup's error. It is for a connection someone else makes: a proxy that
// will connect to host (handler.Outbound). The proxy resolves host again,
// so this check, unlike DialContext's, is of this host's answer.
func (g *Guard) CheckHost(ctx context.Context, network, host string) error {
	addrs, err := g.resolve(ctx, network, host)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if err := g.Check(host, a); err != nil {
			return err
		}
	}
	return nil
}

// resolve is host's addresses: the address itself when host is one.
func (g *Guard) resolve(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return []netip.Addr{a}, nil
	}
	ipNet := "ip"
	switch network {
	case "tcp4":
		ipNet = "ip4"
	case "tcp6":
		ipNet = "ip6"
	}
	var r Resolver = net.DefaultResolver
	if g.Resolver != nil {
		r = g.Resolver
	}
	addrs, err := r.LookupNetIP(ctx, ipNet, host)
	if err != nil {
		var dns *net.DNSError
		if !errors.As(err, &dns) {
			err = &net.DNSError{Err: err.Error(), Name: host}
		}
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no address", Name: host, IsNotFound: true}
	}
	return addrs, nil
}

// control checks the address the socket is about to connect to: the same
// address DialContext checked, checked again where nothing can come between
// the check and the connect.
func (g *Guard) control(host string) func(network, address string, _ syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("egress guard: unreadable address %q", address)
		}
		return g.Check(host, ap.Addr())
	}
}

// ParseList reads a comma-separated list of CIDRs or single addresses
// (--egress-deny, options.allow_addresses): a prefix with host bits set is
// refused, and an IPv4-mapped IPv6 prefix is read as its IPv4 form.
func ParseList(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := ParsePrefix(f)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// ParsePrefix reads one CIDR or single address.
func ParsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("bad CIDR %q: not an address or address/bits", s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, fmt.Errorf("bad CIDR %q: not an address or address/bits", s)
	}
	if p.Masked() != p {
		return p, fmt.Errorf("bad CIDR %q: host bits set (did you mean %s?)", s, p.Masked())
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p, nil
}
