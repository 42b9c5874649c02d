package server_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
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

// SPEC §8: a URL naming a primary and its synchronous standby with
// target_session_attrs=read-write. The primary crashes (an immediate
// shutdown: nothing more reaches the standby) and the standby is promoted:
// the node answers 503 meanwhile, reconnects to the new primary on its own
// and answers 202 again, and every delivery answered 202 before and after
// is on the new primary. TestAsyncStandbyLosesAcknowledgedDeliveries shows
// that this test sees a loss when there is one.
func TestFailoverToSynchronousStandby(t *testing.T) {
	c := pgtest.Own(t)
	dsn := c.NewDB(t)
	u, _ := url.Parse(dsn)
	name := strings.TrimPrefix(u.Path, "/")
	sb := c.NewStandby(t)
	// The step is a write the remote does not deduplicate (retry_mode
	// reconcile): it must never be sent twice, failover or not.
	remote := newCountingRemote(t)
	program, manifest := failoverFiles(t, remote.srv.URL)
	t.Setenv("FO_HMAC", "failover-hmac-key")
	s := testkit.StartServer(t, server.Config{Program: program, Manifest: manifest,
		Database: pgtest.MultiHostURL(c, sb, name), NodeID: "node-fo", Workers: 4, DatabaseTimeout: 2 * time.Second,
		LeaseTTL: 15 * time.Second})
	accepted := map[string]bool{}
	for i := range 30 {
		ev := fmt.Sprintf("before-%d", i)
		if st, _, _ := postTo(t, s.URL()+"/triggers/fo/Charge", ev, 20*time.Second); st != http.StatusAccepted {
			t.Fatalf("post %s before the failover: %d", ev, st)
		}
		accepted[ev] = true
	}
	c.Crash()
	sb.Promote(t)
	promoted := time.Now()
	n := 0
	testkit.WaitFor(t, pgWait, func() bool {
		ev := fmt.Sprintf("after-%d", n)
		n++
		st, after, _ := postTo(t, s.URL()+"/triggers/fo/Charge", ev, 20*time.Second)
		if st == http.StatusAccepted {
			accepted[ev] = true
			return true
		}
		if st != http.StatusServiceUnavailable || after == "" {
			t.Fatalf("post %s during the failover: %d (Retry-After %q); want 202 or 503 with Retry-After", ev, st, after)
		}
		return false
	}, "202 from the new primary")
	t.Logf("202 again %s after the promotion", time.Since(promoted).Round(100*time.Millisecond))
	for i := range 10 {
		ev := fmt.Sprintf("later-%d", i)
		if st, _, _ := postTo(t, s.URL()+"/triggers/fo/Charge", ev, 20*time.Second); st != http.StatusAccepted {
			t.Fatalf("post %s after the failover: %d", ev, st)
		}
		accepted[ev] = true
	}
	// Every acknowledged delivery is on the new primary and its run ends:
	// done, or parked where its call was in flight at the crash (reconcile:
	// an unknown outcome waits for an operator, it is not sent again).
	var parked, done int
	testkit.WaitFor(t, pgWait, func() bool {
		byEvent := map[string]string{}
		for _, e := range statuses(t, sb.URL(name)) {
			byEvent[e[0]] = e[1]
		}
		parked, done = 0, 0
		for ev := range accepted {
			switch byEvent[ev] {
			case "done":
				done++
			case "parked":
				parked++
			case "":
				t.Fatalf("%s was answered 202 and is not on the new primary", ev)
			}
		}
		return done+parked == len(accepted)
	}, "every acknowledged delivery's run to end")
	if max := remote.maxCalls(); max > 1 {
		t.Fatalf("a reconcile write was sent %d times (%v)", max, remote.repeated())
	}
	t.Logf("%d deliveries acknowledged: %d done, %d parked for reconciliation; no write sent twice", len(accepted), done, parked)
}

// countingRemote applies each effect once and counts the requests of each.
type countingRemote struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls map[string]int // by Idempotency-Key
}

func newCountingRemote(t *testing.T) *countingRemote {
	r := &countingRemote{calls: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		r.calls[req.Header.Get("Idempotency-Key")]++
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"charged": true}`))
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *countingRemote) maxCalls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := 0
	for _, n := range r.calls {
		m = max(m, n)
	}
	return m
}

func (r *countingRemote) repeated() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, n := range r.calls {
		if n > 1 {
			out[k] = n
		}
	}
	return out
}

// failoverFiles: one trigger whose one step is a webhook write to url
// with retry_mode reconcile.
func failoverFiles(t *testing.T, url string) (program, manifest string) {
	dir := t.TempDir()
	program, manifest = filepath.Join(dir, "program.air.json"), filepath.Join(dir, "touba.manifest.json")
	prog := `{"air_version": "touba-air-v1", "triggers": [
	  {"ref": "trigger:fo/Charge", "source": {"kind": "webhook"},
	   "steps": [{"id": "charge", "tool": "tool:fo/Charge", "input": {"order": {"$ref": "/event/body"}}}],
	   "retry": {"max_attempts": 8, "initial_interval_ms": 100, "max_interval_ms": 1000}}]}`
	man := fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {"tool:fo/Charge": {
	  "handler": {"kind": "webhook", "options": {"url": %q, "timeout_sec": 2}, "credentials": {"hmac_secret": {"env": "FO_HMAC"}}},
	  "timeout_ms": 2000, "effect_contract": {"kind": "external_write", "retry_mode": "reconcile"}}}}`, url)
	for path, content := range map[string]string{program: prog, manifest: man} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return program, manifest
}

// postTo posts a small JSON delivery with eventID to u within limit.
func postTo(t *testing.T, u, eventID string, limit time.Duration) (int, string, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(`{"id": "`+eventID+`"}`))
	req.Header.Set("x-touba-event-id", eventID)
	resp, err := (&http.Client{Timeout: limit}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), nil
}

// The same failover with an asynchronous standby, the primary's WAL senders
// held (SIGSTOP) while deliveries are answered: they are committed on the
// primary only, the primary crashes, and the promoted standby does not have
// them. If this ever found every delivery, the synchronous test above could
// not tell a lost delivery from a kept one.
func TestAsyncStandbyLosesAcknowledgedDeliveries(t *testing.T) {
	c := pgtest.Own(t)
	dsn := c.NewDB(t)
	u, _ := url.Parse(dsn)
	name := strings.TrimPrefix(u.Path, "/")
	sb := c.NewAsyncStandby(t)
	_, file, _, _ := runtime.Caller(0)
	ex := filepath.Join(filepath.Dir(file), "..", "examples", "quickstart")
	s := testkit.StartServer(t, server.Config{Program: filepath.Join(ex, "program.air.json"),
		Manifest: filepath.Join(ex, "touba.manifest.json"), Database: pgtest.MultiHostURL(c, sb, name), NodeID: "node-async",
		Workers: 0, DatabaseTimeout: 2 * time.Second})
	c.HoldWALSenders(t)
	var accepted []string
	for i := range 10 {
		ev := fmt.Sprintf("unsent-%d", i)
		if st, _, _ := postWithin(t, s.URL(), ev, 20*time.Second); st != http.StatusAccepted {
			t.Fatalf("post %s: %d", ev, st)
		}
		accepted = append(accepted, ev)
	}
	c.Crash()
	sb.Promote(t)
	have := map[string]bool{}
	for _, e := range statuses(t, sb.URL(name)) {
		have[e[0]] = true
	}
	lost := 0
	for _, ev := range accepted {
		if !have[ev] {
			lost++
		}
	}
	if lost == 0 {
		t.Fatalf("an asynchronous standby cut off before the crash kept all %d acknowledged deliveries: "+
			"TestFailoverToSynchronousStandby could not tell a loss", len(accepted))
	}
	t.Logf("%d of %d deliveries answered 202 are lost by the failover to an asynchronous standby", lost, len(accepted))
}
