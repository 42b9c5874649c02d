package history_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
)

// maintLock is the maintenance advisory lock (postgres.maintLock): the
// node holding it creates, freezes, detaches and drops partitions.
const maintLock int64 = 0x746f75626168

// lockRun is how long TestTwoNodesWithLockHolder sends and passes run:
// TOUBA_HISTORY_SOAK (a duration) makes it a soak.
func lockRun(t *testing.T) time.Duration {
	if s := os.Getenv("TOUBA_HISTORY_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("TOUBA_HISTORY_SOAK: %v", err)
		}
		return d
	}
	return 60 * time.Second
}

// Issue 42, SPEC §8.1: two nodes run --history passes at once on one
// database (10 s partitions), while a peer takes and releases the
// maintenance lock at random moments, so that passes find it held at
// every step. Deliveries go to both nodes all along: some end done, some
// failed, some parked, and some wait pending behind their trigger's
// pause. At the end every failed, parked and paused-pending entry intake
// acknowledged is listed by `queue ls`, no detached partition is left (and
// none without the freeze's mark was ever seen), no pass failed, and the
// done entries past the window were forgotten. A build whose pass detached a range its
// freeze had not frozen left such entries in tables nothing read.
func TestTwoNodesWithLockHolder(t *testing.T) {
	const window = 20 * time.Second
	run := lockRun(t)
	ctx := context.Background()
	w := newWorld(t)
	nodes := []*testkit.Daemon{w.node("h1", "--history", window.String(), "--workers", "4")}
	nodes = append(nodes, w.node("h2", "--history", window.String(), "--workers", "4"))
	w.cli(nil, "h1", "triggers", "pause", "hist/Held", "--reason", "the history test's held entries")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var holds atomic.Int64
	holder := w.conn()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			// The random moments of the lock holder: free for 0-30 ms,
			// then held for 0-30 ms.
			time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
			select {
			case <-stop:
				return
			default:
			}
			if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, maintLock); err != nil {
				t.Errorf("the peer's lock: %v", err)
				return
			}
			holds.Add(1)
			// The lock's holding time: a random moment, as above.
			time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
			if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock($1)`, maintLock); err != nil {
				t.Errorf("the peer's unlock: %v", err)
				return
			}
		}
	}()

	// A watcher: a detached table without the freeze's mark, at any moment,
	// holds rows that no freeze kept.
	var mu sync.Mutex
	orphans := map[string]bool{}
	maxParts := 0
	watch := w.conn()
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			ds, err := detached(ctx, watch)
			if err != nil {
				t.Errorf("watch detached tables: %v", err)
				return
			}
			n, err := timePartitions(ctx, watch)
			if err != nil {
				t.Errorf("watch partitions: %v", err)
				return
			}
			mu.Lock()
			for name, marked := range ds {
				if !marked {
					orphans[name] = true
				}
			}
			maxParts = max(maxParts, n)
			mu.Unlock()
		}
	}()

	// Senders: one per node, a delivery every 30 ms, to the triggers in
	// turn (half of them to Ok).
	var got acked
	var refused atomic.Int64
	triggers := []string{"hist/Ok", "hist/Fail", "hist/Ok", "hist/Park", "hist/Ok", "hist/Held"}
	for i, d := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(30 * time.Millisecond)
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				trig := triggers[n%len(triggers)]
				code, id, err := w.post(d, trig, fmt.Sprintf("h%d-%06d", i, n), n)
				switch {
				case err != nil:
					t.Errorf("post to %s: %v", trig, err)
					return
				case code == 202:
					got.add(trig, id)
				default:
					refused.Add(1)
				}
			}
		}()
	}
	start := time.Now()
	// The run's length: deliveries and passes go on meanwhile.
	time.Sleep(run)
	close(stop)
	wg.Wait()
	end := time.Now()
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
		t.Fatal(err)
	}
	log := nodes[0].Log() + nodes[1].Log()
	t.Logf("ran %v: %d acked (Ok %d, Fail %d, Park %d, Held %d), %d refused; the peer took the lock %d times; "+
		"the nodes logged %d stopped passes, %d forgetting passes and %d failed passes; at most %d time partitions a table",
		end.Sub(start).Round(time.Second), len(got.of("hist/Ok"))+len(got.of("hist/Fail"))+len(got.of("hist/Park"))+len(got.of("hist/Held")),
		len(got.of("hist/Ok")), len(got.of("hist/Fail")), len(got.of("hist/Park")), len(got.of("hist/Held")), refused.Load(), holds.Load(),
		strings.Count(log, "maintenance lock is held elsewhere"), strings.Count(log, "forgot what is past --history"),
		strings.Count(log, "history pass failed"), maxParts)

	// A pass stopped by the lock, or finding its range forgotten by the
	// other node meanwhile, goes on; none fails.
	if errs := passErrors(log); len(errs) > 0 {
		t.Errorf("%d passes failed: %s", strings.Count(log, "history pass failed"), strings.Join(errs, "; "))
	}

	mu.Lock()
	if len(orphans) > 0 {
		t.Errorf("detached tables without the freeze's mark seen during the run: %v", sortedKeys(orphans))
	}
	mu.Unlock()

	// Every failed, parked and held entry acknowledged is listed: the runs
	// of the last deliveries end first.
	wantListed := func(status, trigger string, acks []ack) {
		t.Helper()
		var missing []string
		testkit.WaitForReport(t, 60*time.Second, testkit.Every(time.Second, func() bool {
			ls := w.listed("h1", status, trigger)
			missing = missing[:0]
			for _, a := range acks {
				if !ls[a.id] {
					missing = append(missing, a.id)
				}
			}
			return len(missing) == 0
		}), fmt.Sprintf("every %s entry acknowledged (%d) listed %s", trigger, len(acks), status), func() {
			t.Errorf("%d of %d %s entries not listed %s, first: %v", len(missing), len(acks), trigger, status, missing[:min(5, len(missing))])
		})
	}
	wantListed("failed", "hist/Fail", got.of("hist/Fail"))
	wantListed("parked", "hist/Park", got.of("hist/Park"))
	wantListed("pending", "hist/Held", got.of("hist/Held"))

	// No detached table is left: a marked one is dropped by a later pass.
	var left map[string]bool
	testkit.WaitForReport(t, 30*time.Second, testkit.Every(500*time.Millisecond, func() bool {
		var err error
		if left, err = detached(ctx, watch); err != nil {
			t.Fatal(err)
		}
		return len(left) == 0
	}), "no detached partition left", func() { t.Errorf("detached tables left (name: marked): %v", left) })

	// The done entries acknowledged more than the window and two
	// partitions' widths before the end were forgotten.
	var old []string
	for _, a := range got.of("hist/Ok") {
		if a.at.Before(end.Add(-window - 25*time.Second)) {
			old = append(old, a.id)
		}
	}
	if len(old) == 0 {
		t.Fatalf("no done entry older than the window by the end: the run (%v) is too short", run)
	}
	var still int64
	testkit.WaitForReport(t, 60*time.Second, testkit.Every(500*time.Millisecond, func() bool {
		if err := watch.QueryRow(ctx, `SELECT count(*) FROM touba.entries WHERE queue_id = ANY ($1)`, old).Scan(&still); err != nil {
			t.Fatal(err)
		}
		return still == 0
	}), fmt.Sprintf("the %d done entries past the window forgotten", len(old)), func() {
		t.Errorf("%d of %d done entries past the window are still there", still, len(old))
	})
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// passErrors lists the distinct errors of the passes the nodes logged as
// failed.
func passErrors(log string) []string {
	seen := map[string]bool{}
	var out []string
	for _, line := range strings.Split(log, "\n") {
		var m struct {
			Message string `json:"message"`
			Error   string `json:"error"`
		}
		if json.Unmarshal([]byte(line), &m) != nil || m.Message != "history pass failed" || seen[m.Error] {
			continue
		}
		seen[m.Error] = true
		out = append(out, m.Error)
	}
	return out
}
