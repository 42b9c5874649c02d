package storetest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Fencing (SPEC §8): every lease carries a token, and a change made under
// any other token changes nothing and says LeaseLost. On every backend;
// the take-over itself only where leases expire (Stores.LeasesExpire).
func runFencing(t *testing.T, f Factory) {
	t.Run("StaleTokenChangesNothing", func(t *testing.T) { testStaleToken(t, f) })
	t.Run("TakeOver", func(t *testing.T) { testTakeOver(t, f) })
	t.Run("RenewKeepsTheLease", func(t *testing.T) { testRenew(t, f) })
}

// testStaleToken: after a retry and a new lease, the first lease's token
// moves nothing; the new one does.
func testStaleToken(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	a := e.put(t, "a", "1")
	first := e.lease(t, 1, a)[0]
	if first.LeaseToken == 0 {
		t.Fatal("lease carries no token")
	}
	if err := e.Queue.Retry(e.ctx, a, first.LeaseToken, e.clock.Now(), "X", "x"); err != nil {
		t.Fatal(err)
	}
	second := e.lease(t, 1, a)[0]
	if second.LeaseToken <= first.LeaseToken {
		t.Fatalf("second lease token %d, want more than %d", second.LeaseToken, first.LeaseToken)
	}
	soon := e.clock.Now().Add(time.Minute)
	for name, err := range map[string]error{
		"finish":   e.Queue.Finish(e.ctx, a, first.LeaseToken, touba.StatusDone, "", ""),
		"retry":    e.Queue.Retry(e.ctx, a, first.LeaseToken, soon, "X", "x"),
		"postpone": e.Queue.Postpone(e.ctx, a, first.LeaseToken, soon, "X", "x"),
		"renew":    e.Queue.Renew(e.ctx, a, first.LeaseToken),
	} {
		if got := touba.ErrorCode(err); got != touba.ELeaseLost {
			t.Fatalf("%s under the stale token: %v (code %s), want LeaseLost", name, err, got)
		}
	}
	if got := e.get(t, a); got.Status != touba.StatusRunning || got.LeaseToken != second.LeaseToken || got.Attempts != 2 {
		t.Fatalf("after stale changes: %+v, want running under token %d, attempt 2", got, second.LeaseToken)
	}
	if err := e.Queue.Renew(e.ctx, a, second.LeaseToken); err != nil {
		t.Fatalf("renew under the current token: %v", err)
	}
	e.finish(t, a, touba.StatusDone)
}

// testTakeOver: a lease that expires is taken over by another node, which
// first turns the entry's dispatched effect unknown with an event naming
// the old node; the old node then changes nothing: its late outcome is an
// effect.late_outcome event only, and its entry changes are LeaseLost.
func testTakeOver(t *testing.T, f Factory) {
	const ttl = 30 * time.Second
	a := open(t, f, Options{LeaseTTL: ttl})
	if !a.LeasesExpire {
		t.Skip("leases of this backend never expire (one process owns the storage)")
	}
	id := a.put(t, "x", "1")
	held := a.lease(t, 1, id)[0]
	p := prep(id+":charge", "old-call")
	p.Scope, p.LeaseToken = id, held.LeaseToken
	if _, err := a.Journal.Prepare(a.ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := a.Journal.Dispatch(a.ctx, id, p.EffectID, "old-call"); err != nil {
		t.Fatal(err)
	}
	p2 := prep(id+":ship", "old-call-2")
	p2.Scope, p2.LeaseToken, p2.RetryMode = id, held.LeaseToken, touba.RetryNone
	if _, err := a.Journal.Prepare(a.ctx, p2); err != nil {
		t.Fatal(err)
	}

	b := a.again(t)
	b.lease(t, 1) // a's lease is live: nothing to take
	a.clock.Add(ttl + time.Second)
	took := b.lease(t, 1, id)[0]
	if took.LeaseToken <= held.LeaseToken || took.Attempts != 2 {
		t.Fatalf("taken over: token %d attempt %d, want a token above %d, attempt 2", took.LeaseToken, took.Attempts, held.LeaseToken)
	}
	eff := b.effect(t, id, p.EffectID)
	ev := b.events(t, id, p.EffectID)
	last := ev[len(ev)-1]
	if eff.State != touba.EffectUnknown || last.State != touba.EffectUnknown || !strings.Contains(last.Detail, held.LeaseOwner) ||
		held.LeaseOwner == "" {
		t.Fatalf("after take-over: effect %s, last event %+v; want unknown with an event naming node %q", eff.State, last, held.LeaseOwner)
	}

	// The old node, resumed: nothing it does counts.
	late := touba.EffectOutcome{Scope: id, EffectID: p.EffectID, CallID: "old-call", State: touba.EffectApplied,
		ReceiptRef: "r-late", Result: json.RawMessage(`{}`)}
	if got := touba.ErrorCode(a.Journal.Finish(a.ctx, late)); got != touba.ELeaseLost {
		t.Fatalf("late finish: code %s, want LeaseLost", got)
	}
	if eff := b.effect(t, id, p.EffectID); eff.State != touba.EffectUnknown || eff.ReceiptRef != "" {
		t.Fatalf("after the late finish: %+v, want still unknown", eff)
	}
	ev = b.events(t, id, p.EffectID)
	if last := ev[len(ev)-1]; !strings.Contains(last.Detail, "effect.late_outcome") || !strings.Contains(last.Detail, "r-late") {
		t.Fatalf("late outcome not kept as an effect.late_outcome event: %+v", last)
	}
	if got := touba.ErrorCode(a.Journal.Dispatch(a.ctx, id, p2.EffectID, "old-call-2")); got != touba.ELeaseLost {
		t.Fatalf("old node's dispatch: code %s, want LeaseLost (no new call)", got)
	}
	p3 := prep(id+":other", "old-call-3")
	p3.Scope, p3.LeaseToken = id, held.LeaseToken
	if _, err := a.Journal.Prepare(a.ctx, p3); touba.ErrorCode(err) != touba.ELeaseLost {
		t.Fatalf("old node's prepare: %v, want LeaseLost", err)
	}
	if err := a.State.SaveStep(id, held.LeaseToken, "charge", "old-run", json.RawMessage(`{}`)); touba.ErrorCode(err) != touba.ELeaseLost {
		t.Fatalf("old node's checkpoint: %v, want LeaseLost", err)
	}
	if err := a.Queue.Finish(a.ctx, id, held.LeaseToken, touba.StatusDone, "", ""); touba.ErrorCode(err) != touba.ELeaseLost {
		t.Fatalf("old node's finish: %v, want LeaseLost", err)
	}
	if got := b.get(t, id); got.Status != touba.StatusRunning || got.LeaseToken != took.LeaseToken {
		t.Fatalf("entry after the old node's tries: %+v", got)
	}
	// The new holder goes on: the prepared (never sent) effect is free for
	// it, and the unknown one follows §5's table (idempotency_key: again).
	p2.CallID, p2.LeaseToken = "new-call-2", took.LeaseToken
	if _, err := b.Journal.Prepare(b.ctx, p2); err != nil {
		t.Fatalf("new holder's prepare of the released effect: %v", err)
	}
	p.CallID, p.LeaseToken = "new-call", took.LeaseToken
	if got, err := b.Journal.Prepare(b.ctx, p); err != nil || got.Attempts != 2 {
		t.Fatalf("new holder's retry of the unknown effect: %+v, %v", got, err)
	}
	if err := b.Queue.Finish(b.ctx, id, took.LeaseToken, touba.StatusDone, "", ""); err != nil {
		t.Fatal(err)
	}
}

// testRenew: a renewed lease is not taken over; an unrenewed one is.
func testRenew(t *testing.T, f Factory) {
	const ttl = 30 * time.Second
	a := open(t, f, Options{LeaseTTL: ttl})
	if !a.LeasesExpire {
		t.Skip("leases of this backend never expire (one process owns the storage)")
	}
	id := a.put(t, "x", "1")
	held := a.lease(t, 1, id)[0]
	b := a.again(t)
	for range 3 {
		a.clock.Add(ttl - time.Second)
		if err := a.Queue.Renew(a.ctx, id, held.LeaseToken); err != nil {
			t.Fatal(err)
		}
		b.lease(t, 1)
	}
	a.clock.Add(ttl + time.Second)
	b.lease(t, 1, id)
}
