package upgrade_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// journalEvents is how many audit events the journal holds before the
// upgrade: enough that a migration step that scanned or locked it for
// the whole build would hold the previous release's writes far past
// their bound.
const journalEvents = 1_000_000

// dbTimeout is both nodes' --database-timeout, the default: no intake
// write of the previous release may wait longer for the database (plus
// the answer's own way back). With 2 s, a full CI run beside other work
// once starved a commit of the old node past it, migration or not.
const dbTimeout = 5 * time.Second

// TestRollingUpgradeOnPostgres (SPEC §8 rolling upgrades, issue 33): the
// previous release runs a node on a database whose journal is large, and
// keeps taking deliveries while a node of this release starts on the same
// database and migrates it. No delivery to the old node fails or waits
// past --database-timeout, every acknowledged delivery runs to done with
// one write, nothing parks, the old node's log holds no lock timeout, and
// the old node, restarted, runs on the new schema.
func TestRollingUpgradeOnPostgres(t *testing.T) {
	prev := previousBinary(t)
	dsn := pgtest.New(t)
	r := newRemote(t)
	f := newFiles(t, r)
	node := func(bin, name string) *testkit.Daemon {
		return start(t, bin, f.program, "--manifest", f.manifest, "--database", dsn, "--node-id", name,
			"--admin-socket", "", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--workers", "8",
			"--database-timeout", dbTimeout.String(), "--lease-ttl", "10s")
	}
	old := node(prev, "old-1")
	fillJournal(t, dsn)

	var (
		acked    atomic.Int64
		mu       sync.Mutex
		failures []string
		slowest  time.Duration
		stopLoad = make(chan struct{})
		wg       sync.WaitGroup
		targets  atomic.Pointer[[]string]
	)
	targets.Store(&[]string{old.URL()})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stopLoad:
					return
				default:
				}
				ts := *targets.Load()
				base := ts[i%len(ts)]
				id := fmt.Sprintf("up-%d-%d", w, i)
				st, took := post(base, "Orders", id, fmt.Sprintf(`{"n": %d}`, i))
				mu.Lock()
				if base == old.URL() {
					slowest = max(slowest, took)
				}
				if st != 202 {
					failures = append(failures, fmt.Sprintf("%s to %s: %d after %s", id, base, st, took))
				}
				mu.Unlock()
				if st == 202 {
					acked.Add(1)
				}
			}
		}()
	}
	testkit.WaitFor(t, 60*time.Second, func() bool { return acked.Load() >= 200 }, "200 deliveries acknowledged by the old node")
	before := acked.Load()
	neu := node(testkit.Binary(t), "new-1") // migrates as it starts, under the old node's load
	targets.Store(&[]string{old.URL(), neu.URL()})
	testkit.WaitFor(t, 60*time.Second, func() bool { return acked.Load() >= before+400 }, "400 more deliveries acknowledged by both nodes")
	close(stopLoad)
	wg.Wait()

	mu.Lock()
	if len(failures) > 0 {
		t.Errorf("%d deliveries not acknowledged during the upgrade, first: %s", len(failures), failures[0])
	}
	if slowest > dbTimeout+time.Second {
		t.Errorf("the old node answered a delivery after %s during the upgrade, past its %s bound", slowest, dbTimeout)
	}
	t.Logf("%d deliveries acknowledged; the old node's slowest answer took %s", acked.Load(), slowest)
	mu.Unlock()

	// A delivery answered 503 may have committed all the same (its
	// commit outlived the answer's bound): then it runs too, as its
	// sender's retry would find. So: at least every acknowledged one done.
	n := int(acked.Load())
	testkit.WaitFor(t, 120*time.Second, func() bool {
		return countEntries(t, dsn, "done") >= n && countEntries(t, dsn, "pending")+countEntries(t, dsn, "running") == 0
	}, fmt.Sprintf("all %d entries to be done", n))
	for _, st := range []string{"parked", "failed", "pending", "running"} {
		if c := countEntries(t, dsn, st); c != 0 {
			t.Errorf("%d entries %s, want none", c, st)
		}
	}
	done := countEntries(t, dsn, "done")
	if got := r.distinct(); got != done {
		t.Errorf("%d writes reached the remote for %d entries done (%d acknowledged), want one per entry", got, done, n)
	}
	for _, bad := range []string{"55P03", "lock timeout", "canceling statement"} {
		if strings.Contains(old.Log(), bad) {
			t.Errorf("the old node logged %q during the upgrade:\n%s", bad, old.Log())
		}
	}

	// Release N runs on N+1's schema.
	stop(t, old)
	again := node(prev, "old-1")
	mustPost(t, again.URL(), "Orders", "after-upgrade", `{"n": -1}`, 202)
	testkit.WaitFor(t, 60*time.Second, func() bool { return countEntries(t, dsn, "done") == done+1 }, "the restarted old node to run its delivery")
	stop(t, again)
	stop(t, neu)
}

// fillJournal adds journalEvents audit events (for effects of entries
// already gone) and a tenth as many done entries, as a long-running
// deployment has.
func fillJournal(t *testing.T, dsn string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		`INSERT INTO touba.effect_events (scope, effect_id, call_id, state, at, detail)
		 SELECT 'q' || lpad((g / 3)::text, 9, '0'), 'q' || lpad((g / 3)::text, 9, '0') || ':step', 'c', 'prepared',
		        '2026-01-01T00:00:00.000Z', '' FROM generate_series(1, $1::int) g`,
		`INSERT INTO touba.entries (queue_id, trigger_ref, event_id, digest, headers, remote_addr, received_at, status, updated_at)
		 SELECT 'e' || lpad(g::text, 9, '0'), 'trigger:up/Old', 'old-' || g, 'd', '{}', '', '2026-01-01T00:00:00.000Z',
		        'done', '2026-01-01T00:00:00.000Z' FROM generate_series(1, $1::int / 10) g`,
		`ANALYZE touba.effect_events, touba.entries`,
	} {
		args := []any{journalEvents}
		if strings.HasPrefix(q, "ANALYZE") {
			args = nil
		}
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			t.Fatalf("fill the journal: %v", err)
		}
	}
}

// countEntries counts the test's orders (trigger up/Orders) in status.
func countEntries(t *testing.T, dsn, status string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT COUNT(*) FROM touba.entries WHERE trigger_ref = 'trigger:up/Orders' AND status = $1`,
		status).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
