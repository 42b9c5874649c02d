package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

// SPEC §5, §8: the database black-holed in the middle of a drain, the
// node's eight calls answering meanwhile, so their outcomes (deferred
// multi-row statements in one pipeline) meet the silence, behind them the
// rest of the 300 pending: once the path heals,
// every entry ends done, every effect applied, and the remote saw each
// delivery's write under one idempotency key only: nothing lost, none
// written twice under two identities.
func TestDrainSurvivesABlackHoledDatabase(t *testing.T) {
	r := newFlowRemote(t, 20*time.Millisecond)
	program, manifest := flowFiles(t, r.srv.URL, false, 0)
	t.Setenv("FLOW_HMAC", "flow-test-secret")
	dsn := pgtest.New(t)
	proxy, via := pgtest.NewProxy(t, dsn)
	s := testkit.StartServer(t, server.Config{Program: program, Manifest: manifest, Database: via, NodeID: "holed",
		Workers: 8, LeaseTTL: 10 * time.Second, DatabaseTimeout: time.Second})
	const n = 300
	// The first calls wait at the remote, so that the fault comes while
	// their outcomes are still to be written, whatever the load.
	block := make(chan struct{})
	r.mu.Lock()
	r.block = block
	r.mu.Unlock()
	for i := range n {
		postFlow(t, s.URL(), "c", i)
	}
	r.waitCalls(t, 8, 30*time.Second) // every worker in a call
	proxy.BlackHole(true)
	r.mu.Lock()
	r.block = nil
	r.mu.Unlock()
	close(block)                        // the calls answer while the database is silent
	time.Sleep(2500 * time.Millisecond) // the fault's length: past --database-timeout, short of the lease
	proxy.BlackHole(false)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	count := func(q string) int {
		var c int
		if err := conn.QueryRow(ctx, q).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	testkit.WaitFor(t, 90*time.Second, func() bool {
		return count(`SELECT COUNT(*) FROM touba.entries WHERE status IN ('pending', 'running')`) == 0
	}, "the drain to end after the black hole")
	if done := count(`SELECT COUNT(*) FROM touba.entries WHERE status = 'done'`); done != n {
		t.Errorf("%d of %d entries done", done, n)
	}
	if applied := count(`SELECT COUNT(*) FROM touba.effects WHERE state = 'applied'`); applied != n {
		t.Errorf("%d of %d effects applied", applied, n)
	}
	calls, _, _, _ := r.snapshot()
	r.mu.Lock()
	seqs := append([]int(nil), r.order["c"]...)
	r.mu.Unlock()
	seen := map[int]bool{}
	for _, q := range seqs {
		if seen[q] {
			t.Errorf("seq %d written under two idempotency keys", q)
		}
		seen[q] = true
	}
	if calls != n || len(seen) != n {
		t.Errorf("the remote saw %d distinct writes for %d seqs, want %d", calls, len(seen), n)
	}
}
