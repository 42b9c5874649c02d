package egress

import "net/netip"

// IPv6 forms that carry an IPv4 address, and reach it: a guard that looked
// only at the IPv6 address would let [::127.0.0.1] past a deny of
// 127.0.0.0/8, or [2002:a9fe:a9fe::] reach the metadata service through a
// 6to4 relay. IPv4-mapped addresses (::ffff:0:0/96) are unmapped before
// any of this (Check).
var (
	// compat is the IPv4-compatible form (RFC 4291 §2.5.5.1, deprecated,
	// but Linux still routes ::a.b.c.d through its IPv4 stack): the last 32
	// bits; :: and ::1 are the unspecified and loopback addresses instead.
	compat = netip.MustParsePrefix("::/96")
	// sixToFour is 6to4 (RFC 3056): 2002:AABB:CCDD::/48 reaches
	// AA.BB.CC.DD.
	sixToFour = netip.MustParsePrefix("2002::/16")
	// nat64 is the well-known NAT64 prefix (RFC 6052): the last 32 bits.
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
	// nat64Local is the local-use NAT64 prefix (RFC 8215), inside which
	// an operator picks a /48, /56, /64 or /96: each puts the IPv4
	// address elsewhere (RFC 6052 §2.2).
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48")
)

// embeddedV4 is an IPv4 address found inside an IPv6 one, and the form
// that put it there, for messages.
type embeddedV4 struct {
	v4   netip.Addr
	form string
}

// embedded are the IPv4 addresses a (unmapped, no zone) reaches besides
// itself. In the local-use NAT64 prefix the operator's prefix length is
// not known here, so every RFC 6052 layout whose fixed bits (the u octet,
// bits 64-71, and the suffix after the IPv4 address) are zero counts: an
// address is refused when any reading of it is.
func embedded(a netip.Addr) []embeddedV4 {
	if !a.Is6() {
		return nil
	}
	b := a.As16()
	v4 := func(i, j, k, l int) netip.Addr { return netip.AddrFrom4([4]byte{b[i], b[j], b[k], b[l]}) }
	zero := func(from, to int) bool {
		for i := from; i < to; i++ {
			if b[i] != 0 {
				return false
			}
		}
		return true
	}
	switch {
	case compat.Contains(a):
		if a == netip.IPv6Unspecified() || a == netip.IPv6Loopback() {
			return nil
		}
		return []embeddedV4{{v4(12, 13, 14, 15), "an IPv4-compatible address"}}
	case sixToFour.Contains(a):
		return []embeddedV4{{v4(2, 3, 4, 5), "6to4"}}
	case nat64.Contains(a):
		return []embeddedV4{{v4(12, 13, 14, 15), "NAT64"}}
	case nat64Local.Contains(a):
		var out []embeddedV4
		if zero(6, 12) { // /96: prefix up to bit 96, IPv4 in the last 32 bits
			out = append(out, embeddedV4{v4(12, 13, 14, 15), "NAT64"})
		}
		if b[8] == 0 { // the u octet of the /48, /56 and /64 layouts
			if zero(11, 16) {
				out = append(out, embeddedV4{v4(6, 7, 9, 10), "NAT64 /48"})
			}
			if zero(12, 16) {
				out = append(out, embeddedV4{v4(7, 9, 10, 11), "NAT64 /56"})
			}
			if zero(13, 16) {
				out = append(out, embeddedV4{v4(9, 10, 11, 12), "NAT64 /64"})
			}
		}
		return out
	}
	return nil
}
