package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// TestLeasePastPausedEntries: with 20,000 entries of a paused trigger older
// than one it can take, the lease takes that one, and its plan reads the
// paused trigger's entries not one by one but skips them in one seek of
// entries_ready_trigger (EXPLAIN ANALYZE: far fewer rows than the paused).
func TestLeasePastPausedEntries(t *testing.T) {
	st := openNodes(t, 1, time.Minute)[0]
	ctx := context.Background()
	const paused = 20000
	if _, err := st.db.pool.Exec(ctx, `INSERT INTO touba.entries (queue_id, trigger_ref, event_id, digest, body, headers, remote_addr,
		received_at, status, attempts, updated_at, traceparent, conc_max, held, lease_token)
		SELECT '00000000-' || lpad(g::text, 12, '0'), 'trigger:p', 'e' || g, 'd', '\x7b7d'::bytea, '{}', '', '2026-01-01T00:00:00.000Z',
			'pending', 0, '2026-01-01T00:00:00.000Z', '', 0, false, 0 FROM generate_series(1, $1) g`, paused); err != nil {
		t.Fatal(err)
	}
	if _, err := st.db.pool.Exec(ctx, `ANALYZE touba.entries`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Queue.PauseTrigger(ctx, touba.TriggerPause{TriggerRef: "trigger:p", At: time.Now(), Operator: "t"}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: "x", Digest: "d", Body: []byte("{}"), Headers: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := st.db.pool.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) `+pickAround, touba.FormatTime(time.Now()), 10)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		rows.Scan(&line)
		plan = append(plan, line)
	}
	rows.Close()
	text := strings.Join(plan, "\n")
	if strings.Contains(text, fmt.Sprintf("rows=%d loops", paused)) || strings.Contains(text, fmt.Sprintf("Removed by Filter: %d", paused)) {
		t.Fatalf("the pick read the paused trigger's entries:\n%s", text)
	}
	got, err := st.Queue.Lease(ctx, 10)
	if err != nil || len(got) != 1 || got[0].QueueID != r.QueueID {
		t.Fatalf("lease: %v %v, want only %s", got, err, r.QueueID)
	}
}

// A paused trigger's entry whose node died mid-run is not run again by the
// node that takes it over while the pause holds (SPEC §6: entries wait
// pending; on PostgreSQL the pause holds on every node): the take-over
// puts it back to pending, its dispatched effect turned unknown first
// (SPEC §8), and it is leased again only after the resume.
func TestTakeOverOfPausedTriggerWaitsPending(t *testing.T) {
	url := pgtest.New(t)
	ctx := context.Background()
	const ttl = time.Minute
	var shift atomic.Int64
	open := func(node string, offset func() time.Duration) *Store {
		st, err := Open(ctx, Config{URL: url, NodeID: node, LeaseTTL: ttl, ClockOffset: offset})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	a := open("node-a", nil)
	b := open("node-b", func() time.Duration { return time.Duration(shift.Load()) })
	res, err := a.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:p", EventID: "e-1", Digest: "d", Body: []byte(`{}`)})
	if err != nil || !res.Created {
		t.Fatalf("enqueue: %+v, %v", res, err)
	}
	leased, err := a.Queue.Lease(ctx, 1)
	if err != nil || len(leased) != 1 {
		t.Fatalf("lease: %v, %v", leased, err)
	}
	id := leased[0].QueueID
	p := touba.EffectPrepare{Scope: id, EffectID: id + ":charge", ToolRef: "tool:examples.orders/CreateOrder",
		Operation: touba.OperationInvoke, Fingerprint: "sha256:00ff", RetryMode: touba.RetryIdempotencyKey, CallID: "call-1",
		LeaseToken: leased[0].LeaseToken}
	if _, err := a.Journal.Prepare(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := a.Journal.Dispatch(ctx, id, p.EffectID, "call-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Queue.PauseTrigger(ctx, touba.TriggerPause{TriggerRef: "trigger:p", At: time.Now(), Operator: "t"}); err != nil {
		t.Fatal(err)
	}
	// node-a stops renewing; node-b's database clock is past its lease.
	shift.Store(int64(2 * ttl))
	got, err := b.Queue.Lease(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("node-b leased %v of the paused trigger, want nothing", got)
	}
	d, err := b.Queue.Get(ctx, id)
	if err != nil || d.Status != touba.StatusPending {
		t.Fatalf("entry after the take-over: %+v, %v; want pending", d, err)
	}
	if e, err := b.Journal.Get(ctx, id, p.EffectID); err != nil || e.State != touba.EffectUnknown {
		t.Fatalf("effect after the take-over: %+v, %v; want unknown", e, err)
	}
	if err := a.Journal.Finish(ctx, touba.EffectOutcome{Scope: id, EffectID: p.EffectID, CallID: "call-1", State: touba.EffectApplied}); touba.ErrorCode(err) != touba.ELeaseLost {
		t.Fatalf("node-a's late outcome: %v, want LeaseLost", err)
	}
	if _, err := b.Queue.ResumeTrigger(ctx, "trigger:p"); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Queue.Lease(ctx, 10); err != nil || len(got) != 1 || got[0].QueueID != id {
		t.Fatalf("lease after the resume: %v, %v; want %s", got, err, id)
	}
}

// One probe for the cluster (SPEC §2.2 circuit): while node-a's probe is
// in flight, node-b, whose own window of calls crossed the threshold
// before it read the shared state, opens the circuit too; that must not
// turn node-a's probe back into an open circuit whose probe node-b can
// claim once open_ms passed (two probes at once). node-a's own verdict on
// its probe (failed: open again) still applies.
func TestOpenDoesNotEndAnotherNodesProbe(t *testing.T) {
	nodes := openNodes(t, 2, time.Minute)
	a, b := nodes[0].Circuits, nodes[1].Circuits
	ctx := context.Background()
	const ref, open, stale = "tool:x/Write", 30 * time.Second, 2 * time.Minute
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	opened := func(at time.Time) touba.CircuitState {
		return touba.CircuitState{ToolRef: ref, State: touba.CircuitOpen, Since: at, Until: at.Add(open), Calls: 20, Failures: 20}
	}
	if err := a.OpenCircuit(ctx, opened(t0)); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.ClaimProbe(ctx, ref, t0.Add(open), stale); err != nil || !ok {
		t.Fatalf("node-a's probe: %v, %v", ok, err)
	}
	if err := b.OpenCircuit(ctx, opened(t0.Add(open+time.Second))); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.ClaimProbe(ctx, ref, t0.Add(2*open+2*time.Second), stale); err != nil || ok {
		t.Fatalf("node-b claimed a probe while node-a's is in flight: %v, %v", ok, err)
	}
	if s, err := b.Circuit(ctx, ref); err != nil || s.State != touba.CircuitProbing {
		t.Fatalf("shared state %+v, %v; want node-a's probe (probing)", s, err)
	}
	// node-a's probe failed: open again, from its probing.
	if err := a.OpenCircuit(ctx, opened(t0.Add(open+3*time.Second))); err != nil {
		t.Fatal(err)
	}
	if s, err := b.Circuit(ctx, ref); err != nil || s.State != touba.CircuitOpen || !s.Until.Equal(t0.Add(2*open+3*time.Second)) {
		t.Fatalf("after node-a's failed probe: %+v, %v; want open until %s", s, err, t0.Add(2*open+3*time.Second))
	}
}
