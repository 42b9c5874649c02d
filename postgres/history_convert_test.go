package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/uuidv7"
)

// SPEC §8 "Rolling upgrades", §8.1: on a database at the previous
// release's schema with many rows,
//   - 0015 runs while the previous release's writers go on: none fails,
//     none waits past its lock_timeout;
//   - the partitioning waits while a node of the previous release lives
//     (it could not decide identities on partitioned tables), and says so;
//   - once none does, it runs while this release's writers go on, intake
//     with identities included: none fails, none waits past its bound,
//     no row is lost, and the old rows are the partition <t>_old.
func TestConversionBesideWriters(t *testing.T) {
	ctx := context.Background()
	// The nodes' default --database-timeout (lock_timeout 1 s). With 1 s
	// (200 ms), the swap's catalog changes, which take tens of
	// milliseconds, outlasted a writer's lock_timeout once with both
	// cores busy (a full CI run); a swap that copied the 300,000 rows
	// under its lock would still take seconds.
	const timeout = 5 * time.Second
	nodeLock := lockTimeout(timeout)
	url := atMigrationUUID(t, "0014", 300_000)
	conn := superConn(t, url)
	w := startUUIDWriters(t, url, 4, nodeLock)
	err := runMigrations(ctx, t, url, embeddedMigrations(t), timeout)
	errs, slowest, n := w.end()
	if err != nil {
		t.Fatalf("0015: %v", err)
	}
	if len(errs) > 0 {
		t.Fatalf("%d of the previous release's statements failed beside 0015, first: %v", len(errs), errs[0])
	}
	t.Logf("0015 beside the previous release: %d statements, slowest %s", n, slowest)

	// A live node of the previous release (it does not fill migration).
	mustExec(t, conn, `INSERT INTO touba.nodes (node_id, instance, host, pid, boot_id, started_at, heartbeat_at, version)
		VALUES ('old', 'i', 'h', 1, 'b', now(), now(), 'v0.9')`)
	st, err := Open(ctx, Config{URL: url, NodeID: "new", Timeout: timeout, History: 8 * time.Second, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if done, note, err := st.db.convert(ctx, time.Second); err != nil || done || !strings.Contains(note, "old (v0.9)") {
		t.Fatalf("beside a node of the previous release: done %v, note %q, %v; want waiting, naming it", done, note, err)
	}
	mustExec(t, conn, `DELETE FROM touba.nodes WHERE node_id = 'old'`)
	rowsBefore := map[string]int64{}
	for _, tb := range ptables {
		rowsBefore[tb.name] = count(t, conn, `SELECT count(*) FROM touba.`+tb.name)
	}

	w = startUUIDWriters(t, url, 3, nodeLock)
	var intake atomic.Int64
	var intakeErrs []error
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, err := st.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: fmt.Sprint("id-", i%50), Digest: "d", Body: []byte(`{}`)})
			intake.Add(1)
			if err != nil {
				mu.Lock()
				intakeErrs = append(intakeErrs, err)
				mu.Unlock()
			}
		}
	}()
	start := time.Now()
	done, note, err := st.db.convert(ctx, time.Second)
	took := time.Since(start)
	close(stop)
	wg.Wait()
	errs, slowest, n = w.end()
	if err != nil || !done {
		t.Fatalf("partitioning: %v (%s)", err, note)
	}
	t.Logf("partitioning: %s; writers: %d statements, slowest %s; %d deliveries", took, n, slowest, intake.Load())
	if len(errs) > 0 || len(intakeErrs) > 0 {
		t.Fatalf("beside the partitioning, %d statements and %d deliveries failed, first: %v %v", len(errs), len(intakeErrs), errs, intakeErrs)
	}
	if slowest > timeout {
		t.Fatalf("a writer's statement took %s beside the partitioning, past the nodes' bound %s", slowest, timeout)
	}
	for _, tb := range ptables {
		if ok, err := partitioned(ctx, conn, tb.name); err != nil || !ok {
			t.Fatalf("%s not partitioned (%v)", tb.name, err)
		}
		if got, min := count(t, conn, `SELECT count(*) FROM touba.`+tb.name), rowsBefore[tb.name]; got < min {
			t.Fatalf("%s: %d rows, had %d", tb.name, got, min)
		}
		if got := count(t, conn, `SELECT count(*) FROM touba.`+tb.name+`_old`); got < rowsBefore[tb.name] {
			t.Fatalf("%s_old: %d rows, want the %d of before", tb.name, got, rowsBefore[tb.name])
		}
	}
	// A quick conversion leaves time for fewer than 50 deliveries: as
	// many identities as were delivered, each one entry.
	want := min(int64(50), intake.Load())
	if got := count(t, conn, `SELECT count(DISTINCT event_id) FROM touba.entries WHERE event_id LIKE 'id-%'`); got != want ||
		count(t, conn, `SELECT count(*) FROM touba.entries WHERE event_id LIKE 'id-%'`) != want {
		t.Fatalf("identities: want %d entries for %d identities delivered again and again", want, want)
	}
	if level := count(t, conn, `SELECT count(*) FROM touba.meta WHERE key = 'oldest_compatible' AND value = $1`, partitionMigration); level != 1 {
		t.Fatalf("the schema's level is not %s", partitionMigration)
	}
}

// atMigrationUUID is a database migrated up to last, with rows audit
// events and a tenth as many entries, done, all keyed by UUIDv7 ids of a
// year ago as every id the daemon makes.
func atMigrationUUID(t *testing.T, last string, rows int) string {
	t.Helper()
	url := migratedThrough(t, last)
	conn := superConn(t, url)
	base := time.Now().Add(-365 * 24 * time.Hour).UnixMilli()
	id := `lpad(to_hex((` + fmt.Sprint(base) + ` + g / 30) >> 16), 8, '0') || '-' || lpad(to_hex((` + fmt.Sprint(base) +
		` + g / 30) & 65535), 4, '0') || '-7000-8000-' || lpad(to_hex(g), 12, '0')`
	mustExec(t, conn, `INSERT INTO touba.effect_events (scope, effect_id, call_id, state, at, detail)
		SELECT `+strings.ReplaceAll(id, "g", "(g / 3)")+`, 's', 'c', 'prepared', '2026-01-01T00:00:00.000Z', ''
		FROM generate_series(1, $1::int) g`, rows)
	mustExec(t, conn, `INSERT INTO touba.entries (queue_id, trigger_ref, event_id, digest, headers, remote_addr, received_at,
		status, updated_at) SELECT `+id+`, 'trigger:t/a', 'old-' || g, 'd', '{}', '', '2026-01-01T00:00:00.000Z',
		'done', '2026-01-01T00:00:00.000Z' FROM generate_series(1, $1::int) g`, rows/10)
	mustExec(t, conn, `VACUUM ANALYZE touba.effect_events, touba.entries`)
	return url
}

// startUUIDWriters is startWriters with the ids the daemon makes
// (UUIDv7 of now): plain inserts of audit events and entries, as every
// release writes them.
func startUUIDWriters(t *testing.T, url string, k int, lockTimeout time.Duration) *writers {
	t.Helper()
	return startWritersOf(t, url, k, lockTimeout, func(int, int) string { return uuidv7.New() })
}
