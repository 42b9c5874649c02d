package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"

	"github.com/touba/touba-trigger/internal/pgtest"
)

// journalRows is how many audit events the writer test's journal holds:
// enough that building an index on them takes several times a node's
// lock_timeout.
const journalRows = 1_000_000

// atMigration is a database migrated up to the migration named last, with
// rows audit events in its journal and a tenth as many entries. It holds
// no connection once returned, so it can be copied (copyDB).
func atMigration(t *testing.T, last string, rows int) string {
	t.Helper()
	ctx := context.Background()
	url := migratedThrough(t, last)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	mustExec(t, conn, `INSERT INTO touba.effect_events (scope, effect_id, call_id, state, at, detail)
		SELECT 'q' || lpad((g / 3)::text, 9, '0'), 'q' || lpad((g / 3)::text, 9, '0') || ':step', 'c', 'prepared',
		       '2026-01-01T00:00:00.000Z', '' FROM generate_series(1, $1::int) g`, rows)
	mustExec(t, conn, `INSERT INTO touba.entries (queue_id, trigger_ref, event_id, digest, headers, remote_addr, received_at,
		status, updated_at) SELECT 'e' || lpad(g::text, 9, '0'), 'trigger:t/a', '', 'd', '{}', '', '2026-01-01T00:00:00.000Z',
		'done', '2026-01-01T00:00:00.000Z' FROM generate_series(1, $1::int) g`, rows/10)
	mustExec(t, conn, `VACUUM ANALYZE touba.effect_events, touba.entries`)
	return url
}

// migratedThrough is a new database migrated up to the migration named
// last, and no further.
func migratedThrough(t *testing.T, last string) string {
	t.Helper()
	ctx := context.Background()
	url := pgtest.New(t)
	pool, pooled, err := connect(ctx, Config{URL: url, NodeID: "setup", Timeout: DefaultTimeout, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	err = newMigrator(pool, migrationsThrough(t, last), DefaultTimeout, pooled, zerolog.Nop()).run(ctx)
	pool.Close()
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// copyDB is a copy of the database of url (one no session uses), dropped
// when t ends: a file copy, much quicker than filling another.
func copyDB(t *testing.T, url string) string {
	t.Helper()
	ctx := context.Background()
	c := pgtest.Shared(t)
	src := url[strings.LastIndex(url, "/")+1 : strings.Index(url, "?")]
	name := src + "_copy"
	var err error
	defer func() {
		if err != nil {
			t.Logf("copy database %s: %v", src, err)
		}
	}()
	waitFor(t, 10*time.Second, func() bool { // autovacuum may be on it for a moment
		err = c.Exec(ctx, "postgres", `CREATE DATABASE `+name+` TEMPLATE `+src)
		return err == nil
	}, "a copy of database "+src)
	t.Cleanup(func() {
		if err := c.Exec(context.Background(), "postgres", `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	return c.URL(name)
}

// slowBuilds makes every index build on url sort on disk, a few times
// slower: a build lasts many times the writers' lock_timeout on a journal
// the test fills in a second.
func slowBuilds(t *testing.T, url string) {
	t.Helper()
	conn := superConn(t, url)
	var name string
	if err := conn.QueryRow(context.Background(), `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	mustExec(t, conn, `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` SET maintenance_work_mem = '1MB'`)
}

// writers insert into the journal's audit events and into the queue, as
// the nodes of the previous release do during a rolling upgrade, each
// statement under lockTimeout, until stopped.
type writers struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	n       atomic.Int64
	mu      sync.Mutex
	errs    []error
	slowest time.Duration
}

func startWriters(t *testing.T, url string, k int, lockTimeout time.Duration) *writers {
	t.Helper()
	return startWritersOf(t, url, k, lockTimeout, func(i, j int) string { return fmt.Sprintf("w%d-%d", i, j) })
}

// startWritersOf is startWriters with the ids id gives writer i's j-th
// row.
func startWritersOf(t *testing.T, url string, k int, lockTimeout time.Duration, id func(i, j int) string) *writers {
	t.Helper()
	w := &writers{stop: make(chan struct{})}
	ctx := context.Background()
	for i := range k {
		conn := superConn(t, url)
		mustExec(t, conn, fmt.Sprintf(`SET lock_timeout = %d`, lockTimeout.Milliseconds()))
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for j := 0; ; j++ {
				select {
				case <-w.stop:
					return
				default:
				}
				start := time.Now()
				var err error
				if j%2 == 0 {
					_, err = conn.Exec(ctx, `INSERT INTO touba.effect_events (scope, effect_id, call_id, state, at)
						VALUES ($1, $1, 'c', 'prepared', '2026-01-01T00:00:00.000Z')`, id(i, j))
				} else {
					_, err = conn.Exec(ctx, `INSERT INTO touba.entries (queue_id, trigger_ref, event_id, digest, headers,
						remote_addr, received_at, status, updated_at) VALUES ($1, 'trigger:t/a', '', 'd', '{}', '',
						'2026-01-01T00:00:00.000Z', 'pending', '2026-01-01T00:00:00.000Z')`, id(i, j))
				}
				took := time.Since(start)
				w.n.Add(1)
				w.mu.Lock()
				w.slowest = max(w.slowest, took)
				if err != nil && len(w.errs) < 10 {
					w.errs = append(w.errs, err)
				}
				w.mu.Unlock()
			}
		}()
	}
	// Writing before the migration starts, so it meets them.
	writing := false
	defer func() {
		if !writing {
			w.end()
		}
	}()
	waitFor(t, 30*time.Second, func() bool { return w.n.Load() >= int64(10*k) }, "the writers' first statements")
	writing = true
	return w
}

// end stops the writers and returns their errors and slowest statement.
func (w *writers) end() ([]error, time.Duration, int64) {
	close(w.stop)
	w.wg.Wait()
	return w.errs, w.slowest, w.n.Load()
}

// SPEC §8 "Rolling upgrades", issue 33: while migrations 0013 and 0014
// build their indexes on a journal and a queue in use, the previous
// release's writers go on: none waits past its lock_timeout, none fails.
// The same writers beside the migrations as the release before ran them
// (plain CREATE INDEX in the transaction, under SHARE) fail with 55P03:
// the test can tell.
func TestOnlineIndexBuildDoesNotBlockWriters(t *testing.T) {
	ctx := context.Background()
	const timeout = time.Second // the nodes': --database-timeout 1s
	nodeLock := lockTimeout(timeout)

	old := atMigration(t, "0012", journalRows)
	url := copyDB(t, old)
	slowBuilds(t, old)
	w := startWriters(t, old, 4, nodeLock)
	start := time.Now()
	err := runMigrations(ctx, t, old, oldMigrations(t), timeout)
	took := time.Since(start)
	oldErrs, oldSlowest, _ := w.end()
	if err != nil {
		t.Fatalf("old migrations: %v", err)
	}
	if len(oldErrs) == 0 || !lockTimedOut(oldErrs[0]) {
		t.Fatalf("beside the plain index builds (%s), the writers' slowest statement took %s and none failed (%v): "+
			"the journal is too small for this test to show anything", took, oldSlowest, oldErrs)
	}
	t.Logf("old migrations: %s; writers: %d failed, first: %v; slowest %s", took, len(oldErrs), oldErrs[0], oldSlowest)

	slowBuilds(t, url)
	w = startWriters(t, url, 4, nodeLock)
	start = time.Now()
	err = runMigrations(ctx, t, url, embeddedMigrations(t), timeout)
	took = time.Since(start)
	errs, slowest, n := w.end()
	if err != nil {
		t.Fatalf("online migrations: %v", err)
	}
	t.Logf("online migrations: %s; writers: %d statements, slowest %s", took, n, slowest)
	if len(errs) > 0 {
		t.Fatalf("%d writers' statements failed beside the online migrations, first: %v", len(errs), errs[0])
	}
	var invalid int
	if err := superConn(t, url).QueryRow(ctx, `SELECT COUNT(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'touba' AND NOT i.indisvalid`).Scan(&invalid); err != nil || invalid != 0 {
		t.Fatalf("invalid indexes: %d (%v)", invalid, err)
	}
}

func lockTimedOut(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}

// indexValidity is whether touba.name exists and is valid.
func indexValidity(t *testing.T, conn *pgx.Conn, name string) (exists, valid bool) {
	t.Helper()
	err := conn.QueryRow(context.Background(), `SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass($1)`,
		"touba."+name).Scan(&valid)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false
	} else if err != nil {
		t.Fatal(err)
	}
	return true, valid
}

// A node that dies while it builds an index online leaves it INVALID
// (CREATE INDEX CONCURRENTLY commits the index before building it) and
// the migration unrecorded; the next start drops that index, builds it
// again, and records the migration only then.
func TestInterruptedIndexBuildIsRebuilt(t *testing.T) {
	ctx := context.Background()
	url := atMigration(t, "0013", 10_000)
	conn := superConn(t, url)
	// A transaction older than the build keeps it waiting at its end
	// (it waits for every older snapshot), its index committed invalid.
	blocker := superConn(t, url)
	mustExec(t, blocker, `BEGIN ISOLATION LEVEL REPEATABLE READ`)
	mustExec(t, blocker, `SELECT COUNT(*) FROM touba.deliveries`)

	done := make(chan error, 1)
	go func() { done <- runMigrations(ctx, t, url, embeddedMigrations(t), DefaultTimeout) }()
	var pid int
	waitOrEnd(t, done, "the build of entries_hold to wait for the older transaction", func() bool {
		err := conn.QueryRow(ctx, `SELECT p.pid FROM pg_stat_progress_create_index p JOIN pg_stat_activity a USING (pid)
			WHERE p.index_relid = to_regclass('touba.entries_hold') AND a.wait_event_type = 'Lock'`).Scan(&pid)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		return err == nil
	})
	// The node's session dies mid-build (its node killed and the server
	// ending the backend, a failover, an operator).
	mustExec(t, conn, `SELECT pg_terminate_backend($1)`, pid)
	if err := <-done; err == nil {
		t.Fatal("the interrupted migration reported success")
	}
	mustExec(t, blocker, `ROLLBACK`)
	if exists, valid := indexValidity(t, conn, "entries_hold"); !exists || valid {
		t.Fatalf("after the interrupted build: entries_hold exists %v, valid %v; want it left invalid", exists, valid)
	}
	var recorded bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM touba.schema_migrations WHERE name = '0014_fair.sql')`).Scan(&recorded); err != nil || recorded {
		t.Fatalf("0014 recorded (%v) with its index invalid", err)
	}

	st, err := Open(ctx, Config{URL: url, NodeID: "next-start"})
	if err != nil {
		t.Fatalf("next start: %v", err)
	}
	st.Close()
	if exists, valid := indexValidity(t, conn, "entries_hold"); !exists || !valid {
		t.Fatalf("after the next start: entries_hold exists %v, valid %v; want it rebuilt valid", exists, valid)
	}
	if shape := schemaShape(t, conn); !strings.Contains(shape, "migration 0014_fair.sql") || strings.Contains(shape, "\nstep ") {
		t.Fatalf("after the next start:\n%s", shape)
	}
}

// Nodes starting together on a database that needs the online steps all
// start, once the indexes are valid, and the steps are recorded once:
// the ones that find a build under way wait for it.
func TestNodesMigrateTogether(t *testing.T) {
	ctx := context.Background()
	url := atMigration(t, "0012", 200_000)
	const n = 3
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := Open(ctx, Config{URL: url, NodeID: fmt.Sprintf("node-%d", i)})
			if err == nil {
				var valid bool
				err = st.db.pool.QueryRow(ctx, `SELECT bool_and(i.indisvalid) FROM pg_index i
					WHERE i.indexrelid IN (to_regclass('touba.effect_events_pkey'), to_regclass('touba.entries_hold'))`).Scan(&valid)
				if err == nil && !valid {
					err = fmt.Errorf("node-%d started with an index not valid yet", i)
				}
				st.Close()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	conn := superConn(t, url)
	if shape := schemaShape(t, conn); !strings.Contains(shape, "migration 0014_fair.sql") || strings.Contains(shape, "\nstep ") || strings.Contains(shape, "\ninvalid index") {
		t.Fatalf("after three nodes' start:\n%s", shape)
	}
}

// syncBuffer is a log sink safe for the goroutines of a test.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A node that finds another node's online build of an index under way
// (invalid, its table's lock held by the build) waits for it to end, and
// neither drops it nor builds it again; both start once it is valid.
func TestNodeWaitsForAnotherNodesBuild(t *testing.T) {
	ctx := context.Background()
	url := atMigration(t, "0013", 10_000)
	conn := superConn(t, url)
	blocker := superConn(t, url) // keeps node a's build waiting at its end
	mustExec(t, blocker, `BEGIN ISOLATION LEVEL REPEATABLE READ`)
	mustExec(t, blocker, `SELECT COUNT(*) FROM touba.deliveries`)

	aDone := make(chan error, 1)
	go func() { aDone <- runMigrations(ctx, t, url, embeddedMigrations(t), DefaultTimeout) }()
	waitOrEnd(t, aDone, "node a's build to wait", func() bool {
		var n int
		if err := conn.QueryRow(ctx, `SELECT COUNT(*) FROM pg_stat_progress_create_index p JOIN pg_stat_activity a USING (pid)
			WHERE p.index_relid = to_regclass('touba.entries_hold') AND a.wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})

	var log syncBuffer
	bDone := make(chan error, 1)
	go func() {
		st, err := Open(ctx, Config{URL: url, NodeID: "b", Log: zerolog.New(&log)})
		if err == nil {
			st.Close()
		}
		bDone <- err
	}()
	waitOrEnd(t, bDone, "node b to wait for node a's build", func() bool {
		return strings.Contains(log.String(), "waiting for another session's build")
	})
	mustExec(t, blocker, `ROLLBACK`)
	if err := <-aDone; err != nil {
		t.Fatalf("node a: %v", err)
	}
	if err := <-bDone; err != nil {
		t.Fatalf("node b: %v", err)
	}
	if strings.Contains(log.String(), "dropping it") || strings.Contains(log.String(), "index built online") {
		t.Fatalf("node b dropped or built node a's index:\n%s", log.String())
	}
	if exists, valid := indexValidity(t, conn, "entries_hold"); !exists || !valid {
		t.Fatalf("entries_hold exists %v, valid %v", exists, valid)
	}
}

// waitOrEnd waits for cond (waitFor); a report on done before it holds,
// or 30 s without, fails t.
func waitOrEnd(t *testing.T, done <-chan error, what string, cond func() bool) {
	t.Helper()
	waitFor(t, 30*time.Second, func() bool {
		if cond() {
			return true
		}
		select {
		case err := <-done:
			t.Fatalf("ended (%v) before %s", err, what)
		default:
		}
		return false
	}, what)
}
