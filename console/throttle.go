package console

import (
	"container/list"
	"net/netip"
	"sync"
	"time"
)

// Throttling of token guesses (the login form and Authorization: Bearer),
// per client address (auth.guess): the first freeFailures failures cost nothing (an
// operator mistypes), each further one blocks the address for a delay that
// doubles from firstDelay up to maxDelay; a success resets it, and so does
// forgetAfter without a failure. While blocked, a request is answered 429
// with Retry-After and its token is not even compared, so guessing runs at
// about one try per maxDelay. The table holds at most throttleEntries
// addresses; a new one evicts the one seen least recently, so a flood from
// many addresses cannot grow memory.
const (
	freeFailures    = 3
	firstDelay      = time.Second
	maxDelay        = time.Minute
	forgetAfter     = 15 * time.Minute
	throttleEntries = 4096
)

// throttle is the table of failures per address.
type throttle struct {
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

func newThrottle(now func() time.Time, max int) *throttle {
	return &throttle{now: now, max: max, lru: list.New(), entries: map[netip.Prefix]*list.Element{}}
}

// throttleKey is the key a client address is throttled by: its IP, or
// for IPv6 its /64, which one host usually holds whole. An address that
// could not be read (the zero Addr) shares the zero key.
func throttleKey(a netip.Addr) netip.Prefix {
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

// attempt runs compare for key unless key is blocked. It returns what
// compare said, or, without calling compare, how long key must still wait.
// compare runs under the table's lock, so concurrent guesses from one
// address cannot all slip in before the first failure is counted.
func (t *throttle) attempt(key netip.Prefix, compare func() bool) (ok bool, wait time.Duration, failures int) {
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
		if now.Sub(r.last) >= forgetAfter {
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
	if n := r.failures - freeFailures; n > 0 {
		d := maxDelay
		if n <= 16 && firstDelay<<(n-1) < maxDelay {
			d = firstDelay << (n - 1)
		}
		r.until = now.Add(d)
	}
	return false, 0, r.failures
}

func (t *throttle) remove(el *list.Element) {
	delete(t.entries, el.Value.(*throttled).key)
	t.lru.Remove(el)
}

// size is how many addresses the table holds.
func (t *throttle) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lru.Len()
}
