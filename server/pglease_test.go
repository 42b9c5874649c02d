package server_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

// SPEC §8: a node that has not renewed its lease for --lease-ttl minus a
// margin starts no call and stops its retries, an outbound webhook's
// included, before another node may take the entry over. The remote
// answers 429 with Retry-After: 2 (retried in every mode, six tries over
// ten seconds); the database is black-holed after the first try, so every
// renewal fails: no try starts after the lease's hold (8 s less 2 s).
func TestUnrenewedLeaseStopsWebhookRetries(t *testing.T) {
	var mu sync.Mutex
	var tries []time.Time
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		tries = append(tries, time.Now())
		mu.Unlock()
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(remote.Close)
	program, manifest := flowFiles(t, remote.URL, false, 0)
	dsn := pgtest.New(t)
	proxy, via := pgtest.NewProxy(t, dsn)
	t.Setenv("FLOW_HMAC", "flow-test-secret")
	const ttl = 8 * time.Second
	s := testkit.StartServer(t, server.Config{Program: program, Manifest: manifest, Database: via, NodeID: "renewless",
		Workers: 1, LeaseTTL: ttl, DatabaseTimeout: time.Second})
	postFlow(t, s.URL(), "c", 0)
	count := func() (int, time.Time, time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if len(tries) == 0 {
			return 0, time.Time{}, time.Time{}
		}
		return len(tries), tries[0], tries[len(tries)-1]
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { n, _, _ := count(); return n >= 1 }, "the first try")
	proxy.BlackHole(true)
	holed := time.Now()
	time.Sleep(12 * time.Second) // past the six tries' ten seconds
	n, first, last := count()
	proxy.BlackHole(false)
	// The hold (TTL less its margin) runs from the last renewal sent, which
	// may be after the first try but is before the black hole: no try may
	// start past the hole plus the hold (a scheduling margin aside).
	if hold := ttl - 2*time.Second; last.After(holed.Add(hold + 250*time.Millisecond)) {
		t.Fatalf("%d tries, the last %s after the database went silent; want none after %s (the lease's hold)", n,
			last.Sub(holed).Round(100*time.Millisecond), hold)
	}
	t.Logf("%d tries over %s, then none", n, last.Sub(first).Round(100*time.Millisecond))
}
