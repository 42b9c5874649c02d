package server_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

// postWithin is post with a client that gives up after limit: a request
// the daemon leaves hanging fails the test instead of hanging it.
func postWithin(t *testing.T, base, eventID string, limit time.Duration) (int, string, time.Duration) {
	c := &http.Client{Timeout: limit}
	req, _ := http.NewRequest(http.MethodPost, base+"/triggers/examples.billing/Invoice", strings.NewReader(`{"amount":1}`))
	req.Header.Set("x-touba-event-id", eventID)
	start := time.Now()
	resp, err := c.Do(req)
	took := time.Since(start)
	if err != nil {
		return 0, "", took
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After"), took
}

// SPEC §8: the database black-holed (packets dropped, connections left
// open): every request is answered 503 with Retry-After within
// --database-timeout plus a second, never 202 and never left hanging;
// /readyz fails; once the path heals the node answers 202 again on its
// own, and every delivery answered 202 is in the database.
func TestDatabaseBlackHoled(t *testing.T) {
	dsn := pgtest.New(t)
	proxy, via := pgtest.NewProxy(t, dsn)
	const timeout = 2 * time.Second
	_, file, _, _ := runtime.Caller(0)
	ex := filepath.Join(filepath.Dir(file), "..", "examples", "quickstart")
	s := testkit.StartServer(t, server.Config{Program: filepath.Join(ex, "program.air.json"),
		Manifest: filepath.Join(ex, "touba.manifest.json"), Database: via, NodeID: "node-bh", Workers: 2,
		DatabaseTimeout: timeout})

	var mu sync.Mutex
	accepted := map[string]bool{}
	send := func(ev string) (int, string, time.Duration) {
		st, after, took := postWithin(t, s.URL(), ev, timeout+10*time.Second)
		if st == http.StatusAccepted {
			mu.Lock()
			accepted[ev] = true
			mu.Unlock()
		}
		return st, after, took
	}
	for i := range 5 {
		if st, _, _ := send(fmt.Sprintf("before-%d", i)); st != http.StatusAccepted {
			t.Fatalf("post before the black hole: %d", st)
		}
	}
	testkit.WaitFor(t, pgWait, func() bool { return readyz(s.URL()) == http.StatusOK }, "/readyz to pass")

	proxy.BlackHole(true)
	// Three rounds of eight senders: the first meets batches in flight
	// when the path went dark, the later ones a pool whose connections
	// all hang and whose new ones never finish their handshake.
	for round := range 3 {
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ev := fmt.Sprintf("dark-%d-%d", round, g)
				st, after, took := send(ev)
				if st != http.StatusServiceUnavailable || after == "" || took > timeout+time.Second {
					t.Errorf("post %s black-holed: status %d, Retry-After %q after %s; want 503 with Retry-After within %s",
						ev, st, after, took.Round(time.Millisecond), timeout+time.Second)
				}
			}()
		}
		wg.Wait()
	}
	testkit.WaitFor(t, pgWait, func() bool { return readyz(s.URL()) == http.StatusServiceUnavailable }, "/readyz to fail black-holed")
	if t.Failed() {
		t.FailNow()
	}

	proxy.BlackHole(false)
	testkit.WaitFor(t, pgWait, func() bool { return readyz(s.URL()) == http.StatusOK }, "/readyz to pass again")
	testkit.WaitFor(t, pgWait, func() bool {
		st, _, _ := send(fmt.Sprintf("after-%d", time.Now().UnixNano()))
		return st == http.StatusAccepted
	}, "intake to answer 202 again")

	all := statuses(t, dsn)
	byEvent := map[string]bool{}
	for _, e := range all {
		byEvent[e[0]] = true
	}
	mu.Lock()
	defer mu.Unlock()
	for ev := range accepted {
		if !byEvent[ev] {
			t.Errorf("%s was answered 202 and is not in the database", ev)
		}
	}
}
