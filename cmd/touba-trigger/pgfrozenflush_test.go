package main_test

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/postgres"
)

// SPEC §8: a node frozen (SIGSTOP) in the middle of a flush of its
// deferred multi-row statements, their row locks held, stalls no other
// node: the other node accepts deliveries within 5 s, and once the frozen
// node's leases expire takes its entries over and runs every entry to
// done, each effect applied once.
func TestFrozenFlushStallsNoOther(t *testing.T) {
	dsn := pgtest.New(t)
	node := frozenNodes(t, dsn)
	// The entries through a node that runs none of them, once node a
	// listens: had they been there before, a's dispatcher could freeze in
	// its first flush before a logged that it listens (the dispatcher
	// starts first), and the test would wait for that line in vain.
	in := node("flush-intake", nil, 0)
	a := node("flush-a", []string{"TOUBA_CRASHPOINT=stop:" + postgres.CrashFlushSent}, 4)
	defer a.Signal(syscall.SIGCONT) // so that the clean-up's SIGKILL ends it
	const n = 20
	for i := range n {
		if st, _ := postTimed(in.URL(), "frozen/Plain", fmt.Sprintf("f-%d", i), `{"n":1}`, 10*time.Second); st != http.StatusAccepted {
			t.Fatalf("delivery f-%d: %d", i, st)
		}
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return stopped(a.Cmd.Process.Pid) }, "node a to freeze in a flush")

	b := node("flush-b", nil, 4)
	if st, took := postTimed(b.URL(), "frozen/Plain", "u-1", `{"n":2}`, 30*time.Second); st != http.StatusAccepted || took > 5*time.Second {
		t.Errorf("delivery on node b while a is frozen in a flush: %d after %s; want 202 within 5s", st, took.Round(time.Millisecond))
	}
	testkit.WaitFor(t, 60*time.Second, func() bool {
		done := 0
		for _, e := range entryStates(t, dsn) {
			if e[1] == "done" {
				done++
			}
		}
		return done == n+1
	}, "node b to run every entry to done, node a's taken over")
	if !stopped(a.Cmd.Process.Pid) {
		t.Fatal("node a is no longer stopped: the test proved nothing")
	}
	if applied := effectsApplied(t, dsn); applied != n+1 {
		t.Errorf("%d effects applied, want %d: one per entry", applied, n+1)
	}
}

// effectsApplied counts the journal's applied effects.
func effectsApplied(t *testing.T, dsn string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var c int
	if err := conn.QueryRow(ctx, `SELECT COUNT(*) FROM touba.effects WHERE state = 'applied'`).Scan(&c); err != nil {
		t.Fatal(err)
	}
	return c
}
