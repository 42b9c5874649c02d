package server_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/mattn/go-sqlite3"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

// steadyLoad posts new deliveries to url at rate a second until stop,
// and returns the latency of each answer.
type steadyLoad struct {
	sent, failed atomic.Int64
	mu           sync.Mutex
	lat          []time.Duration
	stop         chan struct{}
	wg           sync.WaitGroup
}

func startLoad(t *testing.T, url string, rate int) *steadyLoad {
	t.Helper()
	l := &steadyLoad{stop: make(chan struct{})}
	const senders = 8
	for s := range senders {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			tick := time.NewTicker(time.Second * senders / time.Duration(rate))
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				case <-tick.C:
				}
				start := time.Now()
				code, _ := testkit.Post(t, url, fmt.Sprintf("s%d-%d", s, i), `{"amount":1}`)
				took := time.Since(start)
				l.sent.Add(1)
				if code != http.StatusAccepted {
					l.failed.Add(1)
				}
				l.mu.Lock()
				l.lat = append(l.lat, took)
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *steadyLoad) end() {
	close(l.stop)
	l.wg.Wait()
}

// p99 of the latencies so far.
func (l *steadyLoad) p99() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := append([]time.Duration(nil), l.lat...)
	sort.Slice(s, func(i, k int) bool { return s[i] < s[k] })
	if len(s) == 0 {
		return 0
	}
	return s[len(s)*99/100]
}

// waitUntil sleeps until t: the steady-state tests sample at fixed
// points of a load that runs meanwhile.
func waitUntil(t time.Time) { time.Sleep(time.Until(t)) }

// skipUnderRace skips a test of steady state under load when the race
// detector runs: it slows the daemon five to ten times, which then keeps up
// with no steady load a test can afford, and its backlog grows the
// storage, rightly. Measure at the settings a user runs.
func skipUnderRace(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("a steady-state measure: not under the race detector")
	}
}

// filesSize is the size on disk of the three files, and the largest of
// their WALs.
func filesSize(t *testing.T, dir string) (files, wal int64) {
	t.Helper()
	for _, f := range []string{"q.sqlite", "s.sqlite", "j.sqlite"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err == nil {
			files += st.Size()
		}
		if st, err := os.Stat(filepath.Join(dir, f+"-wal")); err == nil {
			wal = max(wal, st.Size())
		}
	}
	return files, wal
}

// liveEntries counts the entries in the queue file of the running daemon,
// read-only.
func liveEntries(t *testing.T, dir string) int64 {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "q.sqlite")+"?mode=ro&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int64
	if err := db.QueryRow(`SELECT count(*) FROM entries`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// walBound is what a WAL may reach: the writer checkpoints past 4096
// pages of 4 KiB (internal/sqlitex), and SQLite reuses the file from its
// start after that, so it stays about there whatever the load's length.
const walBound = 24 << 20

// SPEC §8.1 on SQLite: under a steady load for several windows of a
// short --history (4 s, 100 deliveries/s), the three files grow less than 15% between the end of
// the second window and the end of the fourth: the window is full, what
// a pass frees the next writes reuse (free pages; no vacuum). Their WALs
// stay under walBound (they grow to the checkpoint threshold, whatever
// --history). Intake keeps answering 202 throughout. (scripts/bench-history measures the same at
// a 20 s window with intake's p99 with and without passes.)
func TestHistorySteadyFiles(t *testing.T) {
	skipUnderRace(t)
	dir := t.TempDir()
	prog, man := quickstart(t)
	window := 4 * time.Second
	s := testkit.StartServer(t, server.Config{Program: prog, Manifest: man, Workers: 4, History: window,
		Queue: filepath.Join(dir, "q.sqlite"), State: filepath.Join(dir, "s.sqlite"), Journal: filepath.Join(dir, "j.sqlite")})
	start := time.Now()
	l := startLoad(t, s.URL()+invoice, 100)
	waitUntil(start.Add(2 * window))
	second, _ := filesSize(t, dir)
	live2 := liveEntries(t, dir)
	waitUntil(start.Add(4 * window))
	fourth, wal := filesSize(t, dir)
	live4 := liveEntries(t, dir)
	l.end()
	growth := float64(fourth-second) / float64(second)
	t.Logf("files: %d bytes and %d entries after 2 windows, %d bytes and %d entries after 4 (%+.1f%%), largest WAL %d; %d deliveries, p99 %s",
		second, live2, fourth, live4, 100*growth, wal, l.sent.Load(), l.p99())
	if l.failed.Load() > 0 {
		t.Fatalf("%d of %d deliveries not answered 202", l.failed.Load(), l.sent.Load())
	}
	// A daemon that cannot keep up (a machine busy with other work) keeps
	// a growing backlog, and files that grow with it, rightly: then the
	// bytes per entry kept must stay flat.
	if kept := float64(live4-live2) / float64(live2); kept > 0.15 {
		perEntry := (float64(fourth)/float64(live4))/(float64(second)/float64(live2)) - 1
		t.Logf("the daemon did not keep up (%+.1f%% entries kept): bytes per entry kept %+.1f%%", 100*kept, 100*perEntry)
		if perEntry >= 0.15 {
			t.Fatalf("bytes per entry kept grew %.1f%% between the second and the fourth window, want under 15%%", 100*perEntry)
		}
	} else if growth >= 0.15 {
		t.Fatalf("files grew %.1f%% between the second and the fourth window, want under 15%%", 100*growth)
	}
	if wal > walBound {
		t.Fatalf("a WAL reached %d bytes, past %d", wal, walBound)
	}
	s.WaitLog(`"message":"forgot what is past --history"`, 5*time.Second)
}

// tableBytes and deadTuples are the partitioned tables' size (all their
// partitions, indexes and TOAST) and their dead row versions.
func tableBytes(t *testing.T, conn *pgx.Conn) (size, dead int64) {
	t.Helper()
	ctx := context.Background()
	if err := conn.QueryRow(ctx, `SELECT COALESCE(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree('touba.entries')
		UNION ALL SELECT 0 LIMIT 1`).Scan(&size); err != nil {
		t.Fatal(err)
	}
	for _, tb := range []string{"effects", "effect_events", "runs", "run_steps", "deliveries"} {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT COALESCE(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree('touba.`+tb+`')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		size += n
	}
	if err := conn.QueryRow(ctx, `SELECT COALESCE(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE schemaname = 'touba'`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	return size, dead
}

// SPEC §8.1 on PostgreSQL: the same steady load for several windows; the
// partitioned tables' size and their dead row versions do not grow over
// two windows once the window is full (partitions dropped whole, nothing
// left for vacuum). A new database's first rows are in <t>_old, which
// spans the first partitions ahead (30 s here) and goes whole after it:
// the windows counted start after it, at the end of the second window
// past it (the fourth of the run) and of the fourth (the sixth).
func TestHistorySteadyTables(t *testing.T) {
	skipUnderRace(t)
	// Four minutes since partitions are at least 10 s wide (issue 42), and
	// its sizes depend on autovacuum's timing on a busy box: a soak, run
	// on purpose. tests/history checks the partition count under load on
	// every run.
	if os.Getenv("TOUBA_HISTORY_STEADY") == "" {
		t.Skip("a four-minute soak: set TOUBA_HISTORY_STEADY=1 to run it")
	}
	dsn := pgtest.New(t)
	prog, man := quickstart(t)
	// Partitions are at least 10 s wide (postgres.PartitionWidth): a
	// window of four of them, measured at times a whole number of widths
	// apart, so that each measure sees the same part of the newest one.
	window := 40 * time.Second
	s := testkit.StartServer(t, server.Config{Program: prog, Manifest: man, Workers: 4, History: window, Database: dsn,
		NodeID: "steady", LeaseTTL: 10 * time.Second})
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	start := time.Now()
	l := startLoad(t, s.URL()+invoice, 100)
	waitUntil(start.Add(4 * window))
	size2, dead2 := tableBytes(t, conn)
	waitUntil(start.Add(6 * window))
	size4, dead4 := tableBytes(t, conn)
	l.end()
	growth := float64(size4-size2) / float64(size2)
	t.Logf("tables: %d bytes, %d dead rows after 2 windows; %d bytes, %d dead rows after 4 (%+.1f%%); %d deliveries, p99 %s",
		size2, dead2, size4, dead4, 100*growth, l.sent.Load(), l.p99())
	// On a machine too busy for the load a delivery the database cannot
	// commit within --database-timeout is refused 503 (never lost): a few.
	if l.failed.Load()*20 > l.sent.Load() {
		t.Fatalf("%d of %d deliveries not answered 202", l.failed.Load(), l.sent.Load())
	}
	if growth >= 0.15 {
		t.Fatalf("tables grew %.1f%% between the second and the fourth window, want under 15%%", 100*growth)
	}
	if float64(dead4) >= 1.15*float64(dead2)+1000 {
		t.Fatalf("dead rows went from %d to %d between the second and the fourth window", dead2, dead4)
	}
	s.WaitLog(`"message":"forgot what is past --history"`, 5*time.Second)
}
