package postgres

import (
	"context"
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
