package gather_test

import (
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// Gatherings on PostgreSQL (SPEC §2.1, §8): any node gathers, any node
// starts a gathering, once.

// newPGWorld is newWorld on a fresh database (skipped, saying so, without
// PostgreSQL 15).
func newPGWorld(t *testing.T, g gathering) *world {
	t.Helper()
	if ok, why := pgtest.Available(); !ok {
		t.Skip("PostgreSQL 15 not installed: " + why)
	}
	w := newWorld(t, g)
	w.dsn = pgtest.New(t)
	return w
}

// node starts a node of the cluster named name.
func (w *world) node(name string) *testkit.Daemon {
	w.t.Helper()
	return testkit.Start(w.t, []string{"GATHER_HMAC=gather-test-secret"}, "serve", w.program, "--manifest", w.manifest,
		"--database", w.dsn, "--node-id", name, "--lease-ttl", "30s", "--listen", "127.0.0.1:0", "--metrics-listen", "",
		"--admin-socket", "", "--log-level", "info", "--workers", "4")
}

// TestPGTwoNodesOneGathering: deliveries of five keys sent at once to two
// nodes, each key's alternating between them, make one gathering per key,
// started once (both nodes' wake loops look for due gatherings), so one
// run per key sees all ten of its deliveries.
func TestPGTwoNodesOneGathering(t *testing.T) {
	t.Parallel()
	w := newPGWorld(t, gathering{window: 3 * time.Second, maxWait: time.Minute, batchSize: 10, batchWindow: time.Second})
	nodes := []*testkit.Daemon{w.node("node-a"), w.node("node-b")}
	const keys, each = 5, 10
	var wg sync.WaitGroup
	errs := make(chan error, keys*each)
	for k := range keys {
		for i := 1; i <= each; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := w.sendTo(nodes[i%2], refProducts, fmt.Sprintf("k%d-%02d", k, i), fmt.Sprintf("k%d", k), i, "")
				if err == nil && a.Status != 202 {
					err = fmt.Errorf("%+v", a)
				}
				if err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a delivery was not accepted: %v", err)
	}
	for k := range keys {
		c := w.waitCalls(fmt.Sprintf("k%d", k), 1)[0]
		got := c.seqs()
		slices.Sort(got)
		if !slices.Equal(got, seqs(1, each)) {
			t.Fatalf("the run of k%d saw %v, want its %d deliveries once each", k, c.seqs(), each)
		}
	}
	testkit.WaitFor(t, waitLong, func() bool { return len(w.entries(refProducts)["done"]) == keys }, "every carrier done")
	if calls, total := w.r.got(); len(calls) != keys || total != keys {
		t.Fatalf("the remote had %d runs, %d calls; want %d, one call each", len(calls), total, keys)
	}
	if m := w.entries(refProducts)["merged"]; len(m) != keys*(each-1) {
		t.Fatalf("%d merged entries, want %d", len(m), keys*(each-1))
	}
}

// TestPGKilledNodeLeavesItsGathering: node A opens a gathering and is
// SIGKILLed while it gathers; node B, started after, starts it at its
// time and runs it once, with every delivery A accepted.
func TestPGKilledNodeLeavesItsGathering(t *testing.T) {
	t.Parallel()
	w := newPGWorld(t, gathering{window: 3 * time.Second, maxWait: time.Minute, batchSize: 10, batchWindow: time.Second})
	a := w.node("node-a")
	w.d = a
	carrier := w.post(refProducts, "x-1", "x", 1)
	w.post(refProducts, "x-2", "x", 2)
	w.post(refProducts, "x-3", "x", 3)
	a.Signal(syscall.SIGKILL)
	a.Wait(10 * time.Second)
	if calls, _ := w.r.got(); len(calls) != 0 {
		t.Fatalf("the gathering ran before its time")
	}
	w.d = w.node("node-b")
	if c := w.waitCalls("x", 1)[0]; !slices.Equal(c.seqs(), seqs(1, 3)) || c.Input.Events[0].QueueID != carrier {
		t.Fatalf("node B's run saw %v, want node A's three deliveries", c.seqs())
	}
	testkit.WaitFor(t, waitLong, func() bool { return len(w.entries(refProducts)["done"]) == 1 }, "the carrier done")
	if _, total := w.r.got(); total != 1 {
		t.Fatalf("%d calls, want 1", total)
	}
}
