package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/uuidv7"
)

// openNodes opens n nodes' stores on one fresh database.
func openNodes(t *testing.T, n int, ttl time.Duration) []*Store {
	t.Helper()
	url := pgtest.New(t)
	var out []*Store
	for i := range n {
		st, err := Open(context.Background(), Config{URL: url, NodeID: fmt.Sprintf("node-%d", i), LeaseTTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		out = append(out, st)
	}
	return out
}

func keyed(ref, key string, seq int) *touba.Delivery {
	return &touba.Delivery{TriggerRef: ref, EventID: fmt.Sprintf("%s-%d", key, seq), Digest: "d",
		Body: []byte(fmt.Sprintf(`{"seq":%d}`, seq)), ConcKey: key, ConcMax: 1}
}

// clockID is a queue id made by a node whose clock reads at.
func clockID(at time.Time) string {
	g := uuidv7.Generator{Now: func() time.Time { return at }}
	return g.New()
}

// TestKeyOrderIsAcceptanceOrderAcrossNodes: a key's entries go in the
// order they were accepted, whichever node accepted them and whatever its
// clock says. Node B's clock is a minute behind node A's, so B's queue id
// for the later delivery sorts before A's for the earlier one: ordering the
// key by queue id would let the later go first.
func TestKeyOrderIsAcceptanceOrderAcrossNodes(t *testing.T) {
	ctx := context.Background()
	nodes := openNodes(t, 2, time.Hour)
	a, b := nodes[0].Queue, nodes[1].Queue
	now := time.Now()
	first := keyed("t", "k", 0)
	if _, err := a.Enqueue(ctx, first); err != nil {
		t.Fatal(err)
	}
	got, err := a.Lease(ctx, 10)
	if err != nil || len(got) != 1 {
		t.Fatalf("lease: %v %v", got, err)
	}
	x, y := keyed("t", "k", 1), keyed("t", "k", 2)
	x.QueueID, y.QueueID = clockID(now), clockID(now.Add(-time.Minute))
	if _, err := a.Enqueue(ctx, x); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Enqueue(ctx, y); err != nil {
		t.Fatal(err)
	}
	if err := b.Finish(ctx, got[0].QueueID, got[0].LeaseToken, touba.StatusDone, "", ""); err != nil {
		t.Fatal(err)
	}
	for _, want := range []*touba.Delivery{x, y} {
		got, err := b.Lease(ctx, 10)
		if err != nil || len(got) != 1 {
			t.Fatalf("lease: %v %v", got, err)
		}
		if got[0].EventID != want.EventID {
			t.Fatalf("leased %s, want %s (acceptance order)", got[0].EventID, want.EventID)
		}
		if err := a.Finish(ctx, got[0].QueueID, got[0].LeaseToken, touba.StatusDone, "", ""); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKeysAcrossThreeNodes: 10 keys x 10 deliveries, each key's posted one
// after the other to the three nodes in turn, all keys at once, while the
// three nodes lease and end entries (done, failed, or back to pending for
// a retry). A key never has two entries running at once, each key's
// entries start in acceptance order (a retried one starts again before the
// next), a failed entry lets the next go, no enqueue fails (deadlocks
// between nodes' batches are tried again), and several keys run at once.
func TestKeysAcrossThreeNodes(t *testing.T) {
	ctx := context.Background()
	nodes := openNodes(t, 3, time.Hour)
	const nKeys, perKey = 10, 10

	var mu sync.Mutex
	running := map[string]int{}   // key -> entries running now
	started := map[string][]int{} // key -> seqs in lease order
	retried := map[string]bool{}  // event id -> retried once
	ended, most, overlap := 0, 0, ""

	stop := make(chan struct{})
	var workers sync.WaitGroup
	for _, n := range nodes {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				got, err := n.Queue.Lease(ctx, 4)
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					time.Sleep(time.Millisecond) // simulated work: an idle worker's poll, as the dispatcher's
					continue
				}
				var wg sync.WaitGroup
				for _, e := range got {
					var seq int
					fmt.Sscanf(e.EventID[len(e.ConcKey)+1:], "%d", &seq)
					mu.Lock()
					running[e.ConcKey]++
					if running[e.ConcKey] > 1 && overlap == "" {
						overlap = e.ConcKey
					}
					cur := 0
					for _, r := range running {
						cur += r
					}
					most = max(most, cur)
					started[e.ConcKey] = append(started[e.ConcKey], seq)
					again := seq%3 == 1 && !retried[e.EventID]
					retried[e.EventID] = true
					mu.Unlock()
					wg.Add(1)
					go func() {
						defer wg.Done()
						time.Sleep(2 * time.Millisecond) // simulated work: the call
						mu.Lock()
						running[e.ConcKey]-- // before the end commits: the next may start at once
						mu.Unlock()
						var err error
						switch {
						case again:
							err = n.Queue.Retry(ctx, e.QueueID, e.LeaseToken, time.Now(), "Remote", "try again")
						case seq%4 == 2:
							err = n.Queue.Finish(ctx, e.QueueID, e.LeaseToken, touba.StatusFailed, "Remote", "no")
						default:
							err = n.Queue.Finish(ctx, e.QueueID, e.LeaseToken, touba.StatusDone, "", "")
						}
						if err != nil {
							t.Error(err)
						}
						if !again {
							mu.Lock()
							ended++
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
			}
		}()
	}

	var posts sync.WaitGroup
	for k := range nKeys {
		posts.Add(1)
		go func() {
			defer posts.Done()
			key := fmt.Sprintf("cust-%02d", k)
			for i := range perKey {
				if _, err := nodes[(k+i)%3].Queue.Enqueue(ctx, keyed("t", key, i)); err != nil {
					t.Errorf("enqueue %s %d: %v", key, i, err)
				}
			}
		}()
	}
	posts.Wait()
	halt := sync.OnceFunc(func() { close(stop); workers.Wait() })
	defer halt()
	waitFor(t, 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ended == nKeys*perKey || t.Failed()
	}, "every entry to end")
	halt()

	mu.Lock()
	defer mu.Unlock()
	if ended != nKeys*perKey {
		t.Fatalf("%d entries ended, want %d", ended, nKeys*perKey)
	}
	if overlap != "" {
		t.Fatalf("key %s had two entries running at once", overlap)
	}
	for k, seqs := range started {
		var want []int
		for i := range perKey {
			want = append(want, i)
			if i%3 == 1 {
				want = append(want, i) // retried once, before the next
			}
		}
		if fmt.Sprint(seqs) != fmt.Sprint(want) {
			t.Fatalf("key %s started %v, want %v", k, seqs, want)
		}
	}
	if most < 3 {
		t.Fatalf("at most %d entries running at once: keys were serialised", most)
	}
	t.Logf("most entries running at once: %d", most)
}
