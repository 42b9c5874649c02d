package server_test

import (
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"runtime"
	"strings"
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
	_, file, _, _ := runtime.Caller(0)
	ex := filepath.Join(filepath.Dir(file), "..", "examples", "quickstart")
	s := testkit.StartServer(t, server.Config{Program: filepath.Join(ex, "program.air.json"),
		Manifest: filepath.Join(ex, "touba.manifest.json"), Database: pgtest.MultiHostURL(c, sb, name), NodeID: "node-fo",
		Workers: 2, DatabaseTimeout: 2 * time.Second})
	accepted := map[string]bool{}
	for i := range 30 {
		ev := fmt.Sprintf("before-%d", i)
		if st, _, _ := postWithin(t, s.URL(), ev, 20*time.Second); st != http.StatusAccepted {
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
		st, after, _ := postWithin(t, s.URL(), ev, 20*time.Second)
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
		if st, _, _ := postWithin(t, s.URL(), ev, 20*time.Second); st != http.StatusAccepted {
			t.Fatalf("post %s after the failover: %d", ev, st)
		}
		accepted[ev] = true
	}
	have := map[string]bool{}
	for _, e := range statuses(t, sb.URL(name)) {
		have[e[0]] = true
	}
	for ev := range accepted {
		if !have[ev] {
			t.Errorf("%s was answered 202 and is not on the new primary", ev)
		}
	}
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
