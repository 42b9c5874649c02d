package flow_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// remote is the outside world of these tests: the webhook a binding calls.
// It records, per concurrency key, the order in which deliveries first
// reach it, deduplicates by Idempotency-Key as a remote that promises it
// would, and counts calls in flight, overall and per key.
type remote struct {
	srv   *httptest.Server
	delay time.Duration

	mu          sync.Mutex
	cond        *sync.Cond
	seen        map[string]bool  // Idempotency-Key
	order       map[string][]int // key -> seqs in first-arrival order
	calls       int              // distinct deliveries seen
	inFlight    int
	maxInFlight int
	perKey      map[string]int // key -> calls in flight now
	keyOverlap  string         // a key seen with two calls in flight at once
	// broken, while set, is the delivery the remote answers 500 to.
	broken *brokenCall
}

type brokenCall struct {
	customer string
	seq      int
}

type call struct {
	Input struct {
		Customer string `json:"customer"`
		Seq      int    `json:"seq"`
	} `json:"input"`
}

func newRemote(t *testing.T, delay time.Duration) *remote {
	r := &remote{delay: delay, seen: map[string]bool{}, order: map[string][]int{}, perKey: map[string]int{}}
	r.cond = sync.NewCond(&r.mu)
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *remote) serve(w http.ResponseWriter, req *http.Request) {
	// A request cut short (its sender killed mid-body, as
	// TestKeyOrderingSurvivesSIGKILL does) wrote nothing: counting it, its
	// key seen under a zero body, made the whole request sent again under
	// that key look like a duplicate, and its delivery missing.
	body, err := io.ReadAll(req.Body)
	var c call
	if err == nil {
		err = json.Unmarshal(body, &c)
	}
	if err != nil {
		http.Error(w, "incomplete request: "+err.Error(), http.StatusBadRequest)
		return
	}
	idem := req.Header.Get("Idempotency-Key")
	key := c.Input.Customer
	r.mu.Lock()
	first := !r.seen[idem]
	if first {
		r.seen[idem] = true
		r.order[key] = append(r.order[key], c.Input.Seq)
		r.calls++
	}
	fail := r.broken != nil && *r.broken == brokenCall{key, c.Input.Seq}
	r.inFlight++
	r.maxInFlight = max(r.maxInFlight, r.inFlight)
	r.perKey[key]++
	if r.perKey[key] > 1 && r.keyOverlap == "" {
		r.keyOverlap = key
	}
	r.cond.Broadcast()
	r.mu.Unlock()

	time.Sleep(r.delay) // keep calls overlapping, so ordering has something to prove

	r.mu.Lock()
	r.inFlight--
	r.perKey[key]--
	r.mu.Unlock()
	if fail {
		http.Error(w, "remote broke mid-write", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"stored": true}`))
}

// waitCalls waits until n distinct deliveries reached the remote.
func (r *remote) waitCalls(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
	defer timer.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.calls < n {
		if time.Now().After(deadline) {
			t.Fatalf("the remote saw %d deliveries, want %d", r.calls, n)
		}
		r.cond.Wait()
	}
}

// checkOrder fails unless every key's deliveries first reached the remote
// in acceptance order 0, 1, 2, ... want-1.
func (r *remote) checkOrder(t *testing.T, keys []string, want int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		got := r.order[k]
		if len(got) != want {
			t.Fatalf("key %s: remote saw %d deliveries, want %d: %v", k, len(got), want, got)
		}
		for i, s := range got {
			if s != i {
				t.Fatalf("key %s: deliveries reached the remote in order %v, want 0..%d", k, got, want-1)
			}
		}
	}
}

// breakOn makes the remote answer 500 to key's delivery seq, after
// recording its arrival (a write that may have happened), until the
// returned func mends it. Set under mu: the remote's handlers
// read it while the test runs.
func (r *remote) breakOn(key string, seq int) (mend func()) {
	r.mu.Lock()
	r.broken = &brokenCall{key, seq}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.broken = nil
		r.mu.Unlock()
	}
}
