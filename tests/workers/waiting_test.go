package workers_test

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// TestWaitingCallsCostNothing measures, in one run, how long another
// trigger's entries take to dispatch with no call waiting for a worker,
// then with WK_WAITING (10,000 by default) waiting: a hold (SPEC §2.2),
// so the two figures match. The assertion is loose (3x) so load on the
// machine does not make it flake; the figures are logged.
func TestWaitingCallsCostNothing(t *testing.T) { eachBackend(t, tWaitingCallsCostNothing) }

func tWaitingCallsCostNothing(t *testing.T, backend string) {
	if testing.Short() {
		t.Skip("posts 10,000 deliveries")
	}
	waiting := 10000
	if v, err := strconv.Atoi(os.Getenv("WK_WAITING")); err == nil {
		waiting = v
	}
	w := newWorld(t, backend, touba.RetryIdempotencyKey, 10000)
	w.start("--workers", "8")
	const n = 300
	measure := func(prefix string) time.Duration {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s-%03d", prefix, i)
		}
		before := w.count(touba.StatusDone, others)
		start := time.Now()
		w.send(others, ids...)
		w.waitStatus(touba.StatusDone, others, before+n, 120*time.Second)
		return time.Since(start)
	}
	none := measure("a")
	var wg sync.WaitGroup
	ids := make([]string, waiting)
	for i := range ids {
		ids[i] = fmt.Sprintf("wait-%05d", i)
	}
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < len(ids); i += 4 {
				// w.send records ids in maps: not from four goroutines.
				if status, _ := testkit.Post(t, w.d.URL()+"/triggers/"+orders, ids[i], `{"order_id":"x"}`); status != http.StatusAccepted {
					t.Errorf("post %s: %d", ids[i], status)
					return
				}
			}
		}()
	}
	wg.Wait()
	with := measure("b")
	if got := w.count(touba.StatusPending, orders); got != waiting {
		t.Fatalf("%d entries of %s pending, want %d", got, orders, waiting)
	}
	t.Logf("%d entries of another trigger dispatched in %s with no call waiting, %s with %d waiting for a worker (%.2fx)",
		n, none.Round(time.Millisecond), with.Round(time.Millisecond), waiting, float64(with)/float64(none))
	if with > 3*none+2*time.Second {
		t.Fatalf("dispatch slowed from %s to %s by %d calls waiting", none, with, waiting)
	}
	w.stop()
}
