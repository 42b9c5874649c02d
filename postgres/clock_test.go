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
	got, err := a.Queue.Lease(ctx, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("lease on the node on time: %v, %d entries", err, len(got))
	}
	leasedAt := time.Now()
	took, err := ahead.Queue.Lease(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(took) != 0 {
		t.Fatalf("the node 60s ahead took %d entries over while their lease had %s left", len(took), 3*time.Second-time.Since(leasedAt))
	}
	// The lease ends by the database's clock: then the node ahead may
	// take it, as any node could.
	deadline := time.Now().Add(30 * time.Second)
	for len(took) == 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		if took, err = ahead.Queue.Lease(ctx, 10); err != nil {
			t.Fatal(err)
		}
	}
	if len(took) != 1 || time.Since(leasedAt) < 3*time.Second {
		t.Fatalf("take-over after %s: %d entries, want 1 once the 3s lease expired", time.Since(leasedAt), len(took))
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
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var ended bool
		if err := st.Queue.db.pool.QueryRow(ctx, `SELECT now() > lease_expires_at::timestamptz FROM touba.entries WHERE queue_id = $1`,
			e.QueueID).Scan(&ended); err != nil {
			t.Fatal(err)
		}
		if ended {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease did not end within 30 s")
		}
	}
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
