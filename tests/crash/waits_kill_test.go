package crash_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// waitKillSeedEnv replays a run of TestWaitsKillAtRandom (which orders get
// a payment early, late or a refund, and when each kill lands; the
// daemon's own timing still varies).
const waitKillSeedEnv = "TOUBA_WAITKILL_SEED"

// ordersPerCycle bounds the orders one cycle of TestWaitsKillAtRandom
// sends (a kill usually ends the cycle first).
const ordersPerCycle = 60

// TestWaitsKillAtRandom SIGKILLs the daemon at random moments while it
// takes a mixed load: orders that write, sleep 150 ms, wait for their
// payment and confirm, whose payments come before the wait begins (an
// offer), soon after (a match) or late, and one order in five refunded
// (a cancel) at any point of its run. Each cycle loads the daemon, kills
// it after 0.3-1.5 s, and restarts it on the same files; then a sender
// resends whatever got no answer and pays every order, and once every
// entry ended the files must show: every acknowledged delivery in the
// queue once, every order not refunded done (each sleep woke once, its
// own payment matched once, write and confirm written once at the remote),
// refunded orders done or cancelled, no payment matching two waits and
// no write repeated (idempotency_key: a write cut mid-call is sent again
// into the remote's deduplication, never written twice).
func TestWaitsKillAtRandom(t *testing.T) {
	t.Parallel()
	cycles := 4
	if testing.Short() {
		cycles = 2
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(waitKillSeedEnv); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", waitKillSeedEnv, v, err)
		}
	}
	t.Logf("seed %d (replay: %s=%d), %d cycles", seed, waitKillSeedEnv, seed, cycles)
	rng := rand.New(rand.NewPCG(seed, 0x77616974))

	prog := waitProg{nap: napMS(150), paid: true, cancel: true}
	w := newWaitWorld(t, touba.RetryIdempotencyKey, prog)
	// One persistent handler process: the test is about where the kills
	// land, and a process per call would make every cycle a few orders.
	if err := os.WriteFile(w.manifest, []byte(manifestFor(remoteBin, w.remote, w.retryMode, persistentKind)), 0o600); err != nil {
		t.Fatal(err)
	}
	want := map[string]orderEnd{}
	next := 1 // the next order number
	d := testkit.Start(t, nil, w.args("--workers", "4")...)
	for c := 0; c < cycles; c++ {
		if c > 0 {
			waitHandlersGone(t, w.remote)
			d = w.restart(4)
		}
		// The plan of this cycle, drawn before it runs: the load runs
		// it until the kill ends it.
		type plan struct {
			n             int
			early, refund bool
		}
		var plans []plan
		for i := 0; i < ordersPerCycle; i++ {
			p := plan{n: next + i, early: rng.IntN(3) == 0, refund: rng.IntN(5) == 0}
			plans = append(plans, p)
		}
		kill := time.Duration(300+rng.IntN(1201)) * time.Millisecond

		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		sentUpTo := make(chan int, 1)
		go func() {
			defer wg.Done()
			var late []int // payments owed once a few more orders went
			n := next
			defer func() { sentUpTo <- n }()
			for _, p := range plans {
				if ctx.Err() != nil {
					return
				}
				n = p.n + 1
				_, ok, _ := w.post(d, ordersPath, orderEvent(p.n), orderID(p.n), orderBody(p.n, time.Time{}))
				if !ok {
					<-ctx.Done() // the daemon is gone; the kill ends this cycle
					return
				}
				if p.early {
					w.post(d, paymentsPath, paymentEvent(p.n), orderID(p.n), orderRefBody(p.n))
				} else {
					late = append(late, p.n)
				}
				if p.refund {
					w.post(d, refundsPath, refundEvent(p.n), orderID(p.n), orderRefBody(p.n))
				}
				if len(late) > 3 {
					m := late[0]
					late = late[1:]
					w.post(d, paymentsPath, paymentEvent(m), orderID(m), orderRefBody(m))
				}
			}
		}()
		timer := time.NewTimer(kill)
		<-timer.C
		d.Kill()
		cancel()
		wg.Wait()
		next = <-sentUpTo
	}
	waitHandlersGone(t, w.remote)
	d = w.restart(4)
	w.resendAll(d)
	// Every order gets its payment; each order's end follows from whether
	// a refund was sent for it.
	for _, id := range w.events() {
		s := w.delivery(id)
		if s.path != ordersPath {
			continue
		}
		var n int
		if _, err := fmt.Sscanf(id, "order-%d", &n); err != nil {
			t.Fatalf("order event %q: %v", id, err)
		}
		if w.delivery(paymentEvent(n)).path == "" {
			w.mustPost(d, paymentsPath, paymentEvent(n), orderID(n), orderRefBody(n))
		}
		want[id] = orderEnd{status: touba.StatusDone, paidBy: paymentEvent(n)}
		if w.delivery(refundEvent(n)).path != "" {
			want[id] = refunded(paymentEvent(n))
		}
	}
	w.resendAll(d)
	w.waitEntries("every entry ended", settledEntries)
	stop(t, d)

	done, cancelled := 0, 0
	for _, e := range w.liveEntries() {
		switch {
		case e.TriggerRef != "trigger:crash/Orders":
		case e.Status == touba.StatusDone:
			done++
		case e.Status == touba.StatusCancelled:
			cancelled++
		}
	}
	t.Logf("%d cycles: %d deliveries, %d orders done, %d cancelled, %d writes at the remote",
		cycles, len(w.events()), done, cancelled, len(w.remoteLines()))
	if done == 0 {
		t.Fatalf("no order finished: the load did not reach the daemon")
	}
	w.checkWaits(prog, want)
}
