package postgres

import (
	"context"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// A node restarted under its --node-id puts the entries it left running
// back to pending; another node may lease one of them before the
// restarted node's journal recovery runs. The entry's dispatched effect
// must already be unknown then (SPEC §8 take-over, §5): left dispatched,
// the new holder gets EffectInProgress at that step, and the recovery,
// which skips entries under a live lease, never converts it.
func TestRequeueRunningTurnsDispatchedUnknown(t *testing.T) {
	url := pgtest.New(t)
	ctx := context.Background()
	open := func(node string, requeue bool) *Store {
		t.Helper()
		st, err := Open(ctx, Config{URL: url, NodeID: node, RequeueRunning: requeue})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	a := open("node-a", false)
	res, err := a.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: "e-1", Digest: "d", Body: []byte(`{}`)})
	if err != nil || !res.Created {
		t.Fatalf("enqueue: %+v, %v", res, err)
	}
	leased, err := a.Queue.Lease(ctx, 1)
	if err != nil || len(leased) != 1 {
		t.Fatalf("lease: %v, %v", leased, err)
	}
	id, token := leased[0].QueueID, leased[0].LeaseToken
	p := touba.EffectPrepare{Scope: id, EffectID: id + ":charge", ToolRef: "tool:examples.orders/CreateOrder",
		Operation: touba.OperationInvoke, Fingerprint: "sha256:00ff", RetryMode: touba.RetryNone, CallID: "call-1", LeaseToken: token}
	if _, err := a.Journal.Prepare(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := a.Journal.Dispatch(ctx, id, p.EffectID, "call-1"); err != nil {
		t.Fatal(err)
	}
	// node-a "crashes" (a is never closed before the checks) and starts
	// again: its entry goes back to pending. Before its recovery, node-c
	// leases the entry.
	open("node-a", true)
	c := open("node-c", false)
	got, err := c.Queue.Lease(ctx, 1)
	if err != nil || len(got) != 1 || got[0].QueueID != id {
		t.Fatalf("node-c's lease: %v, %v; want %s", got, err, id)
	}
	e, err := c.Journal.Get(ctx, id, p.EffectID)
	if err != nil {
		t.Fatal(err)
	}
	if e.State != touba.EffectUnknown {
		t.Fatalf("effect leased by node-c is %s, want unknown (dispatched by node-a's previous run)", e.State)
	}
}
