package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/touba/touba-trigger/internal/pgtest"
)

// TestIntakeLockWaitCostsOneDelivery (issue 32): another node's open
// transaction has inserted the identity of one keyed delivery, so this
// node's INSERT of it must wait for that transaction. The wait costs that
// delivery alone: every other keyed delivery sent meanwhile is stored at
// once, none failing with the one that waited (before shortWait, their
// batch waited lock_timeout and then every delivery of it failed with
// 55P03), and the waiting one is stored, as a duplicate of the other
// node's, once that transaction commits.
func TestIntakeLockWaitCostsOneDelivery(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t)
	st, err := Open(ctx, Config{URL: url, NodeID: "a", LeaseTTL: time.Hour, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	q := st.Queue

	// The other node: the identity inserted, its transaction left open.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	other, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `INSERT INTO touba.entries (queue_id, trigger_ref, event_id, digest, body, headers, remote_addr,
		received_at, status, updated_at, traceparent, conc_key, conc_max, held, conc_seq, program_digest)
		VALUES ('019a0000-0000-7000-8000-000000000001', 't', 'k-0', 'd', '\x7b7d', '{}', '', '2026-01-01T00:00:00.000Z',
		'pending', '2026-01-01T00:00:00.000Z', '', 'k', 1, false, nextval('touba.conc_seqs'), '')`); err != nil {
		t.Fatal(err)
	}

	waiting := make(chan error, 1)
	go func() {
		_, err := q.Enqueue(ctx, keyed("t", "k", 0))
		waiting <- err
	}()
	// The others, on other keys, while that one waits.
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			r, err := q.Enqueue(ctx, keyed("t", fmt.Sprintf("other-%d", i), 1))
			if err == nil && !r.Created {
				err = fmt.Errorf("other-%d: %+v, want created", i, r)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a delivery beside the one that waits failed: %v", err)
		}
	}
	t.Logf("12 deliveries stored in %v while one waited on another transaction", time.Since(start))
	select {
	case err := <-waiting:
		t.Fatalf("the delivery whose identity is locked was answered (%v) before the other transaction ended", err)
	default:
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waiting:
		if err != nil {
			t.Fatalf("the delivery that waited: %v, want it answered once the other transaction committed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery that waited was not answered 10 s after the other transaction committed")
	}
	var n int
	if err := st.db.pool.QueryRow(ctx, `SELECT COUNT(*) FROM touba.entries WHERE trigger_ref = 't'`).Scan(&n); err != nil || n != 13 {
		t.Fatalf("%d entries (%v), want 13: the 12 and the other node's", n, err)
	}
}
