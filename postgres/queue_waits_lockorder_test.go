package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// TestCancelLocksTheWaitBeforeTheEntry: intake's offer to an open wait
// (qOffer) locks the wait's row, then its entry's; a cancel of that entry
// by another node's intake must take them in the same order, or the two
// deadlock (PostgreSQL aborts one, and with it the whole intake batch it
// shares with other deliveries). Transaction r does what qOffer does, with
// a short deadlock_timeout so that it, not the cancel, is the one to see a
// deadlock: it sees none when the cancel waits for the wait's row first.
func TestCancelLocksTheWaitBeforeTheEntry(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t)
	st, err := Open(ctx, Config{URL: url, NodeID: "node-0", LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	q := st.Queue
	ck := touba.CancelKey(waiterRef, 0)
	w := leaseOne(t, q, &touba.Delivery{TriggerRef: waiterRef, EventID: "o-1", Body: []byte(`{}`),
		CancelKeys: []touba.MatchValue{{Key: ck, Value: `"o-1"`}}})
	if got, err := q.BeginWait(ctx, w.LeaseToken, touba.Wait{QueueID: w.QueueID, StepID: "paid", Kind: touba.WaitEvent,
		Key: waitKey, Value: `"o-1"`}); err != nil || got.State != touba.WaitOpen {
		t.Fatalf("begin wait: %+v %v", got, err)
	}

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	r, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Rollback(ctx)
	if _, err := r.Exec(ctx, `SET LOCAL deadlock_timeout = '50ms'`); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Exec(ctx, `SELECT 1 FROM touba.waits WHERE queue_id = $1 AND state = 'open' FOR UPDATE`, w.QueueID); err != nil {
		t.Fatal(err)
	}

	type result struct {
		res touba.EnqueueResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := q.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:orders/Cancelled", EventID: "c-1", Digest: "d",
			Body: []byte(`{}`), Cancels: []touba.MatchValue{{Key: ck, Value: `"o-1"`}}})
		done <- result{res, err}
	}()
	// The cancel's transaction is waiting for the wait's row, which r holds.
	waitFor(t, 10*time.Second, func() bool {
		var waiting int
		if err := conn.QueryRow(ctx, `SELECT COUNT(*) FROM pg_locks WHERE NOT granted`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting > 0
	}, "the cancel to wait for the wait's row")
	if _, err := r.Exec(ctx, `UPDATE touba.entries SET updated_at = updated_at WHERE queue_id = $1`, w.QueueID); err != nil {
		t.Fatalf("an offer locking the wait, then the entry, met the cancel: %v", err)
	}
	if err := r.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil || len(got.res.Cancelled) != 1 || got.res.Cancelled[0] != w.QueueID {
		t.Fatalf("cancel: %+v %v", got.res, got.err)
	}
	if e := mustGet(t, q, w.QueueID); e.Status != touba.StatusCancelled {
		t.Fatalf("entry after the cancel: %s", e.Status)
	}
	if ws, _ := q.Waits(ctx, w.QueueID); len(ws) != 1 || ws[0].State != touba.WaitCancelled {
		t.Fatalf("wait after the cancel: %+v", ws)
	}
}
