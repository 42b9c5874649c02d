package server_test

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/postgres"
)

// SPEC §8: behind PgBouncer in transaction-pooling mode (Debian's 1.18,
// its defaults otherwise: no startup parameter it does not track, no
// prepared statement kept between transactions): three nodes starting at
// once migrate once; every §3.1 identity row holds across two nodes; a
// key's deliveries run in acceptance order across them.
func TestPgBouncerTransactionMode(t *testing.T) {
	c := pgtest.Shared(t)
	dsn := c.NewDB(t)
	via := c.PgBouncer(t, dsn)

	// Start and migrate: three at once, through the pooler.
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := postgres.Open(context.Background(), postgres.Config{URL: via, NodeID: fmt.Sprintf("m-%d", i), Log: zerolog.Nop()})
			if err == nil {
				err = st.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d through pgbouncer: %v", i, err)
		}
	}

	// Identity across nodes: 200 identical deliveries over two nodes.
	addrs := startNodes(t, via, 2)
	same := sendAll(t, addrs, "evt-pgb", func(int) string { return `{"amount":7}` })
	count := map[string]int{}
	for _, a := range same {
		if a.status != http.StatusAccepted || a.queueID != same[0].queueID {
			t.Fatalf("identical delivery through pgbouncer answered %+v, want 202 with queue id %s", a, same[0].queueID)
		}
		count[a.result]++
	}
	if count["enqueued"] != 1 || count["duplicate"] != 199 || countEntries(t, dsn, "evt-pgb") != 1 {
		t.Fatalf("identical deliveries through pgbouncer: %v and %d entries, want 1 enqueued, 199 duplicate, 1 entry",
			count, countEntries(t, dsn, "evt-pgb"))
	}

	// Keyed ordering across two nodes, on a database of its own.
	kdsn := c.NewDB(t)
	r := newFlowRemote(t, 2*time.Millisecond)
	program, manifest := flowFiles(t, r.srv.URL, true, 0)
	nodes := flowNodes(t, c.PgBouncer(t, kdsn), program, manifest, 2, 4)
	const nKeys, perKey = 4, 6
	for k := range nKeys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perKey {
				postFlow(t, nodes[(k+i)%len(nodes)].URL(), fmt.Sprintf("pk-%d", k), i)
			}
		}()
	}
	wg.Wait()
	r.waitCalls(t, nKeys*perKey, 120*time.Second)
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range nKeys {
		key := fmt.Sprintf("pk-%d", k)
		for i, s := range r.order[key] {
			if s != i {
				t.Fatalf("key %s through pgbouncer: order %v, want 0..%d", key, r.order[key], perKey-1)
			}
		}
	}
	if r.keyOverlap != "" {
		t.Fatalf("key %s had two calls in flight at once through pgbouncer", r.keyOverlap)
	}
}

// SPEC §8 through PgBouncer: a node killed during a call; another node
// takes the entry over once the lease expired and runs it.
func TestPgBouncerTakeOver(t *testing.T) {
	c := pgtest.Shared(t)
	dsn := c.NewDB(t)
	via := c.PgBouncer(t, dsn)
	r := newFlowRemote(t, 0)
	r.block = make(chan struct{})
	program, manifest := flowFiles(t, r.srv.URL, false, 0)
	bin := filepath.Join(t.TempDir(), "touba-trigger")
	if err := gobuild.Build("..", "./cmd/touba-trigger", bin); err != nil {
		t.Fatal(err)
	}
	a := testkit.StartCmd(t, exec.Command(bin, "serve", program, "--manifest", manifest,
		"--database", via, "--node-id", "pgb-a", "--lease-ttl", "8s", "--workers", "1", "--listen", "127.0.0.1:0",
		"--metrics-listen", "", "--admin-socket", ""), []string{"FLOW_HMAC=flow-test-secret"})
	postFlow(t, a.URL(), "c", 0)
	testkit.WaitFor(t, 30*time.Second, func() bool { _, in, _, _ := r.snapshot(); return in == 1 }, "node a's call in flight")
	a.Kill()
	close(r.block)
	killed := time.Now()
	flowNodes(t, via, program, manifest, 1, 2)
	testkit.WaitFor(t, 60*time.Second, func() bool {
		all := statuses(t, dsn)
		return len(all) == 1 && countStatus(all, "done") == 1
	}, "node b to take the entry over and finish it")
	t.Logf("taken over and done %s after the kill (lease ttl 8s)", time.Since(killed).Round(100*time.Millisecond))
}
