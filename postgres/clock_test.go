package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// SPEC §8: lease expiry is decided by the database's clock. A node whose
// clock runs 60 s ahead of the others takes over no entry another node
// leased for 10 s a moment ago; the lease expires for it, as for any
// node, only once the database's clock passed it.
func TestClockSkewTakesNothingOver(t *testing.T) {
	url := pgtest.New(t)
	open := func(node string, now func() time.Time) *Store {
		st, err := Open(context.Background(), Config{URL: url, NodeID: node, LeaseTTL: 3 * time.Second, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	a := open("on-time", nil)
	ahead := open("ahead", func() time.Time { return time.Now().Add(60 * time.Second) })
	ctx := context.Background()
	if _, err := a.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t/T", EventID: "e-1", Digest: "d", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	leasedAt := time.Now() // before the lease starts: the take-over is timed from no later
	got, err := a.Queue.Lease(ctx, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("lease on the node on time: %v, %d entries", err, len(got))
	}
	took, err := ahead.Queue.Lease(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(took) != 0 {
		t.Fatalf("the node 60s ahead took %d entries over while their lease had %s left", len(took), 3*time.Second-time.Since(leasedAt))
	}
	// The lease's end as the database wrote it: the take-over is checked
	// against it, on the database's clock. (Timed on this process's clock
	// it could seem early: the lease may be claimed in the database before
	// Lease is called, and a busy machine shows that gap.)
	var expires string
	if err := a.Queue.db.pool.QueryRow(ctx, `SELECT lease_expires_at FROM touba.entries WHERE queue_id = $1`, got[0].QueueID).Scan(&expires); err != nil {
		t.Fatal(err)
	}
	// The lease ends by the database's clock: then the node ahead may
	// take it, as any node could.
	waitFor(t, 30*time.Second, func() bool {
		if took, err = ahead.Queue.Lease(ctx, 10); err != nil {
			t.Fatal(err)
		}
		return len(took) != 0
	}, "the node ahead to take the entry over")
	if len(took) != 1 {
		t.Fatalf("take-over: %d entries, want 1", len(took))
	}
	// The new lease ends 3s after the take-over, by the database's clock.
	var renewed string
	if err := a.Queue.db.pool.QueryRow(ctx, `SELECT lease_expires_at FROM touba.entries WHERE queue_id = $1`, got[0].QueueID).Scan(&renewed); err != nil {
		t.Fatal(err)
	}
	was, _ := touba.ParseTime(expires)
	now, _ := touba.ParseTime(renewed)
	if at := now.Add(-3 * time.Second); at.Before(was) {
		t.Fatalf("taken over at %s by the database's clock, before the lease expired at %s (%s after the lease call)", at, was, time.Since(leasedAt))
	}
}

// A node whose clock runs behind cannot start a call on a lease the
// database says has ended (SPEC §8): prepare and dispatch fence by the
// database's now(), not the node's.
func TestClockBehindStartsNoCallOnAnExpiredLease(t *testing.T) {
	url := pgtest.New(t)
	st, err := Open(context.Background(), Config{URL: url, NodeID: "behind", LeaseTTL: 2 * time.Second,
		Now: func() time.Time { return time.Now().Add(-60 * time.Second) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	if _, err := st.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t/T", EventID: "e-1", Digest: "d", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	got, err := st.Queue.Lease(ctx, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("lease: %v, %d entries", err, len(got))
	}
	e := got[0]
	// Wait until the lease has ended by the database's clock.
	waitFor(t, 30*time.Second, func() bool {
		var ended bool
		if err := st.Queue.db.pool.QueryRow(ctx, `SELECT now() > lease_expires_at::timestamptz FROM touba.entries WHERE queue_id = $1`,
			e.QueueID).Scan(&ended); err != nil {
			t.Fatal(err)
		}
		return ended
	}, "the lease to end by the database's clock")
	_, perr := st.Journal.Prepare(ctx, touba.EffectPrepare{Scope: e.QueueID, EffectID: e.QueueID + ":s", ToolRef: "tool:t/T",
		Operation: touba.OperationInvoke, Fingerprint: "sha256:x", RetryMode: touba.RetryNone, CallID: "c-1", LeaseToken: e.LeaseToken})
	var derr error
	if perr == nil {
		derr = st.Journal.Dispatch(ctx, e.QueueID, e.QueueID+":s", "c-1")
	}
	if perr == nil && derr == nil {
		t.Fatal("a node 60 s behind prepared and dispatched a call on a lease that had ended")
	}
	if code := touba.ErrorCode(errors.Join(perr, derr)); code != touba.ELeaseLost {
		t.Fatalf("prepare %v, dispatch %v: want LeaseLost", perr, derr)
	}
}
