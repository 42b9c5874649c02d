package postgres

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// TestWaitingKeepsItsKeyUntilCancelled: a waiting entry holds its
// concurrency key like a running one (the key's next entry is held), and
// when a cancel_on match ends it the next one goes; a keyed delivery's
// offer matches like any other.
func TestWaitingKeepsItsKeyUntilCancelled(t *testing.T) {
	ctx := context.Background()
	nodes := openNodes(t, 2, time.Hour)
	a, b := nodes[0].Queue, nodes[1].Queue
	ck := touba.CancelKey(waiterRef, 0)
	first := keyed(waiterRef, "cust-1", 0)
	first.CancelKeys = []touba.MatchValue{{Key: ck, Value: `"cust-1"`}}
	w := leaseOne(t, a, first)
	later := time.Now().Add(time.Hour)
	if got, err := a.BeginWait(ctx, w.LeaseToken, touba.Wait{QueueID: w.QueueID, StepID: "grace", Kind: touba.WaitSleep,
		WakeAt: &later}); err != nil || got.State != touba.WaitOpen {
		t.Fatalf("sleep: %+v %v", got, err)
	}
	next := keyed(waiterRef, "cust-1", 1)
	if _, err := b.Enqueue(ctx, next); err != nil {
		t.Fatal(err)
	}
	if e := mustGet(t, b, next.QueueID); !e.Held {
		t.Fatalf("the key's next entry is not held while the first waits: %+v", e)
	}
	if got, err := b.Lease(ctx, 10); err != nil || len(got) != 0 {
		t.Fatalf("leased %v %v while the key's entry waits", got, err)
	}
	// A keyed delivery carrying an offer (its own key, another trigger).
	pay := keyed(awaitedRef, "acct-9", 0)
	pay.Offers = []touba.MatchValue{{Key: waitKey, Value: `"nobody"`}}
	if res, err := b.Enqueue(ctx, pay); err != nil || !res.Created || len(res.Matched) != 0 {
		t.Fatalf("keyed offer: %+v %v", res, err)
	}
	res, err := b.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:orders/Cancelled", EventID: "cancel-1", Digest: "d",
		Body: []byte(`{}`), Cancels: []touba.MatchValue{{Key: ck, Value: `"cust-1"`}}})
	if err != nil || !slices.Equal(res.Cancelled, []string{w.QueueID}) {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	if e := mustGet(t, a, next.QueueID); e.Held {
		t.Fatalf("the key's next entry still held after the waiting one was cancelled")
	}
	got, err := a.Lease(ctx, 10)
	if err != nil || !slices.ContainsFunc(got, func(d *touba.Delivery) bool { return d.QueueID == next.QueueID }) {
		t.Fatalf("lease after the cancel: %v %v; want %s", got, err, next.QueueID)
	}
}

// TestDurableStepsThroughPgBouncer: behind PgBouncer in transaction
// mode (no prepared statement kept between transactions, timeouts set per
// transaction), waits and offers racing on two nodes, sleeps and cancels
// work as directly.
func TestDurableStepsThroughPgBouncer(t *testing.T) {
	c := pgtest.Shared(t)
	via := c.PgBouncer(t, c.NewDB(t))
	var nodes []*Store
	for i := range 2 {
		st, err := Open(context.Background(), Config{URL: via, NodeID: fmt.Sprintf("pgb-%d", i), LeaseTTL: time.Hour, Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if !st.db.pooled {
			t.Fatal("opened through PgBouncer, not in pooled mode")
		}
		nodes = append(nodes, st)
	}
	raceWaitAndOffer(t, nodes, 10)
	ctx := context.Background()
	at := time.Now().UTC().Truncate(time.Millisecond)
	sleepers(t, nodes[0], 5, at)
	if n, err := nodes[1].Queue.Wake(ctx, at, 10); err != nil || n != 5 {
		t.Fatalf("wake: %d %v", n, err)
	}
	ck := touba.CancelKey(waiterRef, 0)
	if _, err := nodes[0].Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: waiterRef, EventID: "k", Digest: "d", Body: []byte(`{}`),
		CancelKeys: []touba.MatchValue{{Key: ck, Value: `"k"`}}}); err != nil {
		t.Fatal(err)
	}
	if res, err := nodes[1].Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:x", EventID: "c", Digest: "d", Body: []byte(`{}`),
		Cancels: []touba.MatchValue{{Key: ck, Value: `"k"`}}}); err != nil || len(res.Cancelled) != 1 {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	if err := nodes[0].Queue.SaveProgram(ctx, "d1", []byte("{}")); err != nil {
		t.Fatal(err)
	}
}
