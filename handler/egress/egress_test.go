package egress_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/touba/touba-trigger/handler/egress"
	"github.com/touba/touba-trigger/internal/testkit"
)

func TestCheck(t *testing.T) {
	g := &egress.Guard{Deny: mustList(t, "10.0.0.0/8"), Allow: mustList(t, "169.254.10.0/24, 10.1.2.3")}
	for _, tc := range []struct {
		addr string
		why  string // "" allowed
	}{
		{"169.254.169.254", "cloud metadata"},
		{"::ffff:169.254.169.254", "cloud metadata"},
		{"169.254.1.1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"fd00:ec2::254", "cloud metadata"},
		{"100.100.100.200", "cloud metadata"},
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"::ffff:0.0.0.0", "unspecified"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"ff02::1", "multicast"},
		{"255.255.255.255", "broadcast"},
		{"240.0.0.1", "reserved"},
		{"64:ff9b::a9fe:a9fe", "NAT64 (169.254.169.254)"},
		{"10.9.9.9", "--egress-deny 10.0.0.0/8"},
		{"::ffff:10.9.9.9", "--egress-deny 10.0.0.0/8"},
		// Allowed: loopback and private ranges by default, the allow
		// list over the default ranges and over --egress-deny.
		{"127.0.0.1", ""},
		{"::1", ""},
		{"192.168.1.10", ""},
		{"fd12:3456::1", ""},
		{"93.184.216.34", ""},
		{"169.254.10.7", ""},
		{"::ffff:169.254.10.7", ""},
		{"10.1.2.3", ""},
	} {
		err := g.Check("", netip.MustParseAddr(tc.addr))
		var fe *egress.ForbiddenError
		switch {
		case tc.why == "" && err != nil:
			t.Errorf("%s: refused (%v), want allowed", tc.addr, err)
		case tc.why != "" && !errors.As(err, &fe):
			t.Errorf("%s: %v, want a ForbiddenError", tc.addr, err)
		case tc.why != "" && !strings.Contains(err.Error(), tc.why):
			t.Errorf("%s: %q, want it to say %q", tc.addr, err, tc.why)
		}
	}
}

func TestParseList(t *testing.T) {
	got, err := egress.ParseList(" 10.0.0.0/8,192.0.2.1 , ::ffff:169.254.0.0/112,,fd00::/8")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.0.2.1/32", "169.254.0.0/16", "fd00::/8"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("[%d] = %s, want %s", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"10.0.0.1/8", "example.com", "10.0.0.0/33", "fe80::1%eth0"} {
		if _, err := egress.ParseList(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// resolver answers each lookup with the next of answers (the last one
// again once they run out).
type resolver struct {
	answers [][]netip.Addr
	n       atomic.Int32
}

func (r *resolver) LookupNetIP(_ context.Context, _, _ string) ([]netip.Addr, error) {
	i := int(r.n.Add(1)) - 1
	return r.answers[min(i, len(r.answers)-1)], nil
}

// counter is a loopback listener that counts the connections it accepts.
func counter(t *testing.T) (net.Listener, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return ln, &n
}

// The guard dials the address it checked, not the name: a name answered
// once with an allowed address and then with a denied one connects to the
// first; a name answered with a refused address is never dialled.
func TestDialDialsTheCheckedAddress(t *testing.T) {
	ln, accepted := counter(t)
	port := ln.Addr().(*net.TCPAddr).Port
	loop := netip.MustParseAddr("127.0.0.1")
	r := &resolver{answers: [][]netip.Addr{{netip.MustParseAddr("169.254.169.254")}, {loop}}}
	g := &egress.Guard{Resolver: r}
	_, err := g.DialContext(context.Background(), "tcp", net.JoinHostPort("rebind.test", strconv.Itoa(port)))
	var fe *egress.ForbiddenError
	if !errors.As(err, &fe) || fe.Host != "rebind.test" {
		t.Fatalf("first dial: %v, want a ForbiddenError naming rebind.test", err)
	}
	c, err := g.DialContext(context.Background(), "tcp", net.JoinHostPort("rebind.test", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("second dial (answered 127.0.0.1): %v", err)
	}
	c.Close()
	if got := r.n.Load(); got != 2 {
		t.Fatalf("%d lookups, want one per dial", got)
	}
	// A name answered with an allowed and a refused address is refused.
	r2 := &resolver{answers: [][]netip.Addr{{loop, netip.MustParseAddr("::ffff:169.254.169.254")}}}
	if _, err := (&egress.Guard{Resolver: r2}).DialContext(context.Background(), "tcp", net.JoinHostPort("mixed.test", strconv.Itoa(port))); !errors.As(err, &fe) {
		t.Fatalf("mixed answer: %v, want refused", err)
	}
	testkit.WaitFor(t, 10*time.Second, func() bool { return accepted.Load() >= 1 }, "the rebound name's allowed connection accepted")
	// Denied loopback: refused before any connect.
	before := accepted.Load()
	if before != 1 {
		t.Fatalf("listener accepted %d connections, want 1 (the refused address was never dialled)", before)
	}
	deny := &egress.Guard{Deny: mustList(t, "127.0.0.0/8")}
	if _, err := deny.DialContext(context.Background(), "tcp", ln.Addr().String()); !errors.As(err, &fe) {
		t.Fatalf("denied loopback: %v, want refused", err)
	}
	if _, err := deny.DialContext(context.Background(), "tcp", net.JoinHostPort("::ffff:127.0.0.1", strconv.Itoa(port))); !errors.As(err, &fe) {
		t.Fatalf("denied loopback, IPv4-mapped: %v, want refused", err)
	}
	c, err = (&egress.Guard{}).DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// Only the allowed dial reached the listener (the connection is
	// counted once accepted, which may come after Dial returned).
	testkit.WaitFor(t, 10*time.Second, func() bool { return accepted.Load() >= before+1 }, "the allowed connection accepted")
	if got := accepted.Load(); got != before+1 {
		t.Fatalf("listener accepted %d connections, want %d", got, before+1)
	}
}

func mustList(t *testing.T, s string) []netip.Prefix {
	t.Helper()
	p, err := egress.ParseList(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Issue 44: IPv6 forms that embed an IPv4 address are checked as that
// address (IPv4-compatible, 6to4, NAT64 well-known and local-use), and the
// reserved ranges 100.64.0.0/10, 192.0.0.0/24 and 198.18.0.0/15 (and the
// IPv6 counterparts) are refused by default.
func TestCheckEmbeddedAndReserved(t *testing.T) {
	g := &egress.Guard{Deny: mustList(t, "127.0.0.0/8")}
	allowing := &egress.Guard{Deny: mustList(t, "127.0.0.0/8"), Allow: mustList(t, "169.254.169.254, 100.64.0.0/10")}
	for _, tc := range []struct {
		addr string
		why  string // "" allowed
	}{
		{"::127.0.0.1", "--egress-deny 127.0.0.0/8 through an IPv4-compatible address (127.0.0.1)"},
		{"::169.254.169.254", "cloud metadata (link-local) through an IPv4-compatible address"},
		{"2002:a9fe:a9fe::", "cloud metadata (link-local) through 6to4 (169.254.169.254)"},
		{"2002:7f00:1::1", "--egress-deny 127.0.0.0/8 through 6to4 (127.0.0.1)"},
		{"64:ff9b::7f00:1", "--egress-deny 127.0.0.0/8 through NAT64 (127.0.0.1)"},
		{"64:ff9b:1::a9fe:a9fe", "cloud metadata (link-local) through NAT64 (169.254.169.254)"},
		{"64:ff9b:1:a9fe:a9:fe00::", "through NAT64 /48 (169.254.169.254)"},
		{"64:ff9b:1:a9:fe:a9fe::", "through NAT64 /56 (169.254.169.254)"},
		{"64:ff9b:1:0:a9:fea9:fe00:0", "through NAT64 /64 (169.254.169.254)"},
		{"100.64.0.1", "reserved (shared address space"},
		{"100.127.255.254", "reserved (shared address space"},
		{"192.0.0.8", "reserved (IETF protocol assignments)"},
		{"198.18.0.1", "reserved (benchmarking)"},
		{"198.19.255.255", "reserved (benchmarking)"},
		{"::ffff:198.18.0.1", "reserved (benchmarking)"},
		{"2001:2::1", "reserved (benchmarking)"},
		{"2001:1::1", "reserved (IETF protocol assignments)"},
		{"2002:6440:1::", "reserved (shared address space"}, // 6to4 of 100.64.0.1
		// Allowed: what they embed is allowed, and the neighbours of the
		// reserved ranges.
		{"::1", ""},
		{"2002:5db8:d822::1", ""},        // 6to4 of 93.184.216.34
		{"64:ff9b::5db8:d822", ""},       // NAT64 of 93.184.216.34
		{"64:ff9b:1::5db8:d822", ""},     // local NAT64 (/96) of 93.184.216.34
		{"64:ff9b:1:5db8:d8:2200::", ""}, // local NAT64 (/48) of 93.184.216.34
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"192.0.1.1", ""},
		{"198.17.255.255", ""},
		{"198.20.0.0", ""},
		{"2001:db8::1", ""},
		{"2606:4700::1111", ""},
	} {
		err := g.Check("", netip.MustParseAddr(tc.addr))
		var fe *egress.ForbiddenError
		switch {
		case tc.why == "" && err != nil:
			t.Errorf("%s: refused (%v), want allowed", tc.addr, err)
		case tc.why != "" && !errors.As(err, &fe):
			t.Errorf("%s: %v, want a ForbiddenError", tc.addr, err)
		case tc.why != "" && !strings.Contains(err.Error(), tc.why):
			t.Errorf("%s: %q, want it to say %q", tc.addr, err, tc.why)
		}
	}
	// A binding's allow list allows the embedded address too.
	for _, addr := range []string{"2002:a9fe:a9fe::", "64:ff9b::a9fe:a9fe", "::ffff:100.64.0.1", "100.64.0.1"} {
		if err := allowing.Check("", netip.MustParseAddr(addr)); err != nil {
			t.Errorf("%s with its IPv4 address allowed: %v", addr, err)
		}
	}
}

// CheckHost checks every address a name resolves to, or a literal one.
func TestCheckHost(t *testing.T) {
	g := &egress.Guard{Resolver: fixedResolver{"metadata.test": {"93.184.216.34", "169.254.169.254"}, "ok.test": {"93.184.216.34"}}}
	ctx := context.Background()
	var fe *egress.ForbiddenError
	for host, refused := range map[string]bool{"metadata.test": true, "ok.test": false, "169.254.169.254": true,
		"[::127.0.0.1]": false, "::169.254.169.254": true, "93.184.216.34": false} {
		err := g.CheckHost(ctx, "tcp", host)
		if got := errors.As(err, &fe); got != refused || !refused && err != nil {
			t.Errorf("%s: %v, want refused %v", host, err, refused)
		}
	}
	var dns *net.DNSError
	if err := g.CheckHost(ctx, "tcp", "unknown.test"); !errors.As(err, &dns) {
		t.Errorf("unknown.test: %v, want a DNS error", err)
	}
}

// fixedResolver answers names from a map.
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
