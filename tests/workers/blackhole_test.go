package workers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/sdk/handler"
)

// TestWorkerBehindABlackHole: the worker's connections to the daemon are
// black-holed mid-take (nothing forwarded, no reset) while calls are
// handed out. The worker gives up on them by itself and connects again;
// the calls lost in the hole end unknown at their timeout and are handed
// out again under the same effect id (idempotency_key); every delivery
// ends done, none parked, one effect each.
func TestWorkerBehindABlackHole(t *testing.T) {
	w := newWorld(t, sqliteBackend, touba.RetryIdempotencyKey, 2000)
	w.start("--workers", "8")
	p := testkit.NewProxy(t, w.d.Addr)
	rec := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// A short take: the SDK bounds one at its wait plus 30 s, which is
		// how long the take caught in the hole hangs.
		wk := &handler.Worker{URL: "http://" + p.Addr(), Token: token, Tools: []handler.Tool{rec.tool("w1")},
			MaxInFlight: 4, TakeWait: time.Second, Logf: func(format string, args ...any) { t.Logf("w1: "+format, args...) }}
		done <- wk.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})

	w.send(orders, "bh-0", "bh-1", "bh-2")
	w.waitStatus("done", orders, 3, 30*time.Second)

	var held int
	testkit.WaitFor(t, 10*time.Second, func() bool { held = p.Hole(); return held > 0 }, "a worker connection to black-hole")
	var later []string
	for i := 3; i < 9; i++ {
		later = append(later, fmt.Sprintf("bh-%d", i))
	}
	w.send(orders, later...)
	// The take open in the hole hangs until the SDK's bound on it (its
	// wait plus 30 s); the deliveries then drain through a new connection.
	w.waitStatus("done", orders, 9, 120*time.Second)
	for _, st := range []string{"parked", "failed", "pending", "running"} {
		if n := w.count(st, orders); n != 0 {
			t.Errorf("%d entries %s after the black hole, want none", n, st)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.effects) != 9 {
		t.Errorf("the worker ran %d effects, want 9 (one per delivery)", len(rec.effects))
	}
	var again []string
	for id, n := range rec.effects {
		if n > 1 {
			again = append(again, fmt.Sprintf("%s ×%d", id, n))
		}
	}
	t.Logf("%d connection(s) black-holed; effects run again under their key: %s", held, strings.Join(again, ", "))
}
