package postgres

import (
	"context"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// A call's fence (PrepareDispatched, deferred or not, and Dispatch)
// extends a lease by the whole --lease-ttl when less than the TTL minus a
// second is left, and only locks one taken or renewed within that second
// (dbFresh): the fresh one keeps its expiry to the byte, the older one
// ends a TTL after the call.
func TestCallFenceExtendsOnlyAStaleLease(t *testing.T) {
	st, _ := deferStore(t)
	ctx := context.Background()
	ds := leaseAll(t, st, 6)
	ttl := st.db.cfg.LeaseTTL
	if ttl < 10*time.Second {
		t.Fatalf("lease TTL %s: the test wants the default", ttl)
	}
	// Even entries just leased (100 ms ago), odd ones 3 s ago.
	age := func(i int) time.Duration {
		return map[bool]time.Duration{true: 100 * time.Millisecond, false: 3 * time.Second}[i%2 == 0]
	}
	expiry := make([]string, len(ds))
	for i, d := range ds {
		if err := st.db.pool.QueryRow(ctx, `UPDATE touba.entries SET lease_expires_at = `+st.db.dbTime(ttl-age(i))+`
			WHERE queue_id = $1 RETURNING lease_expires_at`, d.QueueID).Scan(&expiry[i]); err != nil {
			t.Fatal(err)
		}
	}
	// 0, 1: PrepareDispatched (deferred); 2, 3: the same statement alone;
	// 4, 5: Prepare, then Dispatch.
	for i, d := range ds {
		p := pdOf(d, "call-1")
		var err error
		switch i / 2 {
		case 0:
			_, err = st.Journal.PrepareDispatched(ctx, p)
		case 1:
			err = st.db.writer(d.QueueID).Do(ctx, func(ctx context.Context, tx *Tx) error {
				fenced, inserted, err := st.Journal.prepareDispatchedFused(ctx, tx, p, st.db.now())
				if err == nil && (!fenced || !inserted) {
					t.Errorf("entry %d: fenced %v, inserted %v", i, fenced, inserted)
				}
				return err
			})
		case 2:
			if _, err = st.Journal.Prepare(ctx, p); err == nil {
				err = st.Journal.Dispatch(ctx, p.Scope, p.EffectID, p.CallID)
			}
		}
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	for i, d := range ds {
		var now, got string
		if err := st.db.pool.QueryRow(ctx, `SELECT `+st.db.dbNow()+`, lease_expires_at FROM touba.entries WHERE queue_id = $1`,
			d.QueueID).Scan(&now, &got); err != nil {
			t.Fatal(err)
		}
		n, _ := touba.ParseTime(now)
		g, _ := touba.ParseTime(got)
		if i%2 == 0 && got != expiry[i] {
			t.Errorf("entry %d, leased %s ago: expiry %s, want it unchanged (%s)", i, age(i), got, expiry[i])
		}
		if i%2 == 1 && (g.Sub(n) < ttl-time.Second || got == expiry[i]) {
			t.Errorf("entry %d, leased %s ago: expiry %s at %s, want a TTL (%s) from the call", i, age(i), got, now, ttl)
		}
	}
}
