// Package guesses throttles guesses at a token per client address: the
// console's login and bearer tokens (SPEC §6.1), and the workers' tokens
// (SPEC §4.3), which are throttled the same way.
package guesses

import (
	"container/list"
	"net/netip"
	"sync"
	"time"
)

// Throttling of token guesses, per client address: the first FreeFailures failures cost nothing (an
// operator mistypes), each further one blocks the address for a delay that
// doubles from FirstDelay up to MaxDelay; a success resets it, and so does
// ForgetAfter without a failure. While blocked, a request is answered 429
// with Retry-After and its token is not even compared, so guessing runs at
// about one try per MaxDelay. The table holds at most Entries
// addresses; a new one evicts the one seen least recently, so a flood from
// many addresses cannot grow memory.
const (
	FreeFailures = 3
	FirstDelay   = time.Second
	MaxDelay     = time.Minute
	ForgetAfter  = 15 * time.Minute
	Entries      = 4096
)

// Table is the table of failures per address.
type Table struct {
	now     func() time.Time
	max     int
	mu      sync.Mutex
	lru     *list.List // of *throttled, most recently seen first
	entries map[netip.Prefix]*list.Element
}

// throttled is one address's record.
type throttled struct {
	key      netip.Prefix
	failures int
	last     time.Time // of the last failure
	until    time.Time // blocked before this
}

// New returns an empty table of at most max addresses.
func New(now func() time.Time, max int) *Table {
	return &Table{now: now, max: max, lru: list.New(), entries: map[netip.Prefix]*list.Element{}}
}

// Key is the key a client address is throttled by: its IP, or
// for IPv6 its /64, which one host usually holds whole. An address that
// could not be read (the zero Addr) shares the zero key.
func Key(a netip.Addr) netip.Prefix {
	if !a.IsValid() {
		return netip.Prefix{}
	}
	a = a.Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

// Attempt runs compare for key unless key is blocked. It returns what
// compare said, or, without calling compare, how long key must still wait.
// compare runs under the table's lock, so concurrent guesses from one
// address cannot all slip in before the first failure is counted.
func (t *Table) Attempt(key netip.Prefix, compare func() bool) (ok bool, wait time.Duration, failures int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	el := t.entries[key]
	if el != nil {
		r := el.Value.(*throttled)
		if now.Before(r.until) {
			t.lru.MoveToFront(el) // still guessing: the last to be evicted
			return false, r.until.Sub(now), r.failures
		}
		if now.Sub(r.last) >= ForgetAfter {
			t.remove(el)
			el = nil
		}
	}
	if compare() {
		if el != nil {
			t.remove(el)
		}
		return true, 0, 0
	}
	if el == nil {
		if t.lru.Len() >= t.max {
			t.remove(t.lru.Back())
		}
		el = t.lru.PushFront(&throttled{key: key})
		t.entries[key] = el
	}
	t.lru.MoveToFront(el)
	r := el.Value.(*throttled)
	r.failures++
	r.last = now
	if n := r.failures - FreeFailures; n > 0 {
		d := MaxDelay
		if n <= 16 && FirstDelay<<(n-1) < MaxDelay {
			d = FirstDelay << (n - 1)
		}
		r.until = now.Add(d)
	}
	return false, 0, r.failures
}

func (t *Table) remove(el *list.Element) {
	delete(t.entries, el.Value.(*throttled).key)
	t.lru.Remove(el)
}

// Size is how many addresses the table holds.
func (t *Table) Size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lru.Len()
}
