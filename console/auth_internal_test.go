package console

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"
)

// TestSafeNext: only a path of this console comes back; anything a browser
// could read as another host, or a scheme, falls back to the overview.
func TestSafeNext(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"/parked", "/parked"},
		{"/entries?status=failed&trigger=t", "/entries?status=failed&trigger=t"},
		{"/entries/01a2?x=%2F%2F", "/entries/01a2?x=%2F%2F"}, // an encoded "//" in the query is data
		{"/deliveries/x#frag", "/deliveries/x#frag"},
		{"/", "/"},
		{"", "/"},
		{"parked", "/"},
		{"//x", "/"},
		{"///x", "/"},
		{"/\t/evil.example", "/"}, // browsers drop the tab: //evil.example
		{"/\n/x", "/"},
		{"/\r/x", "/"},
		{"/\x00/x", "/"},
		{"/\x7f/x", "/"},
		{"/p\x1b[31m", "/"},
		{"/\\x", "/"},   // browsers read "\" as "/"
		{"/\\/x", "/"},  // the same, twice
		{"\\\\x", "/"},  // likewise
		{"/a\\b", "/"},  // any backslash
		{"/%2f/x", "/"}, // decodes to //x
		{"/%2F/x", "/"}, // the same, upper case
		{"/%5c/x", "/"}, // decodes to /\/x
		{"/%09/x", "/"}, // decodes to a tab
		{"/%zz", "/"},   // does not parse
		{"https://x", "/"},
		{"https:/x", "/"},
		{"javascript:alert(1)", "/"},
		{" /x", "/"},
		{"/%252f/x", "/%252f/x"}, // decodes once, to /%2f/x: a path of this console
	} {
		if got := safeNext(tt.in); got != tt.want {
			t.Errorf("safeNext(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// clock is a fake time.Now, moved by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func wrong() bool                        { return false }
func right() bool                        { return true }
func addr(i int) netip.Prefix {
	return peerKey(fmt.Sprintf("10.%d.%d.%d:4000", i>>16&255, i>>8&255, i&255))
}

// peerKey is the throttle key of a TCP peer address.
func peerKey(remoteAddr string) netip.Prefix {
	return throttleKey(netip.MustParseAddrPort(remoteAddr).Addr())
}
func mustWait(t *testing.T, d, want time.Duration) {
	t.Helper()
	if d != want {
		t.Fatalf("wait %s, want %s", d, want)
	}
}

// TestThrottleSchedule: freeFailures wrong tokens cost nothing, then each
// blocks the address for 1s, 2s, 4s, ... up to maxDelay; while blocked the
// token is not compared (even the right one); a success resets the count,
// and so does forgetAfter without a failure.
func TestThrottleSchedule(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	th := newThrottle(c.now, 16)
	k := addr(1)
	for i := 0; i < freeFailures; i++ {
		if ok, wait, _ := th.Attempt(k, wrong); ok || wait != 0 {
			t.Fatalf("free failure %d: ok=%v wait=%s", i+1, ok, wait)
		}
	}
	want := firstDelay
	for i := 0; i < 10; i++ {
		if _, wait, _ := th.Attempt(k, wrong); wait != 0 {
			t.Fatalf("guess %d refused before it was compared: %s", freeFailures+i+1, wait)
		}
		compared := false
		ok, wait, _ := th.Attempt(k, func() bool { compared = true; return true })
		if ok || compared {
			t.Fatalf("while blocked: ok=%v, token compared=%v", ok, compared)
		}
		mustWait(t, wait, want)
		c.advance(wait - time.Millisecond)
		if _, wait, _ := th.Attempt(k, right); wait != time.Millisecond {
			t.Fatalf("just before the end: wait %s, want 1ms", wait)
		}
		c.advance(time.Millisecond)
		want = min(want*2, maxDelay)
	}
	if ok, _, _ := th.Attempt(k, right); !ok {
		t.Fatal("the right token after the wait was refused")
	}
	// Reset: the free failures are back.
	for i := 0; i < freeFailures; i++ {
		th.Attempt(k, wrong)
	}
	_, wait, _ := th.Attempt(k, right)
	mustWait(t, wait, 0)
	th.Attempt(k, wrong)
	th.Attempt(k, wrong)
	th.Attempt(k, wrong)
	th.Attempt(k, wrong) // the 4th after the reset: blocked 1s
	_, wait, _ = th.Attempt(k, right)
	mustWait(t, wait, firstDelay)
	// Forgotten after forgetAfter without a failure.
	c.advance(forgetAfter)
	if ok, wait, n := th.Attempt(k, wrong); ok || wait != 0 || n != 1 {
		t.Fatalf("after forgetAfter: ok=%v wait=%s failures=%d, want a first failure", ok, wait, n)
	}
	// Another address is not affected by this one.
	if ok, _, _ := th.Attempt(addr(2), right); !ok {
		t.Fatal("another address was refused")
	}
}

// TestThrottleMemoryBound: failures from 100,000 addresses leave at most
// the table's size of records, and memory flat; the addresses seen last
// are still blocked, and an IPv6 /64 is one record.
func TestThrottleMemoryBound(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	const size = 1024
	th := newThrottle(c.now, size)
	flood := func(from, to int) {
		for i := from; i < to; i++ {
			k := addr(i)
			for j := 0; j <= freeFailures; j++ {
				th.Attempt(k, wrong)
			}
		}
	}
	flood(0, 10_000)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	flood(10_000, 100_000)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if got := th.Size(); got != size {
		t.Fatalf("table holds %d addresses, want %d", got, size)
	}
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 1<<20 {
		t.Fatalf("heap grew by %d bytes over 90,000 more addresses", grown)
	}
	if _, wait, _ := th.Attempt(addr(100_000-1), right); wait == 0 {
		t.Fatal("the last address of the flood is no longer blocked")
	}
	if _, wait, _ := th.Attempt(addr(0), right); wait != 0 {
		t.Fatal("the first address of the flood is still in the table")
	}
	// One host's IPv6 /64 is one address.
	v6 := newThrottle(c.now, size)
	for i := 0; i < 100; i++ {
		v6.Attempt(peerKey(fmt.Sprintf("[2001:db8:1:2::%x]:443", i)), wrong)
	}
	if got := v6.Size(); got != 1 {
		t.Fatalf("100 addresses of one /64 take %d records, want 1", got)
	}
	if _, wait, _ := v6.Attempt(peerKey("[2001:db8:1:2:ffff::1]:1"), right); wait == 0 {
		t.Fatal("another address of the /64 is not blocked")
	}
}
