package history_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
)

// The load test's numbers: 100 deliveries a second for a minute, under
// --history 8s (partitions at the 10 s floor, a pass every second).
const (
	loadWindow    = 8 * time.Second
	loadRate      = 100 // deliveries a second
	loadRun       = 60 * time.Second
	loadSenders   = 16
	maxPartitions = 12 // time partitions a table: about window/width behind, 30 s ahead
)

// SPEC §8.1, issue 42: partitions at their 10 s floor under a steady load
// are forgotten as fast as they are created: intake never answers 503
// (no insert waits for a partition that passes failed to make), every
// delivery is answered 202, the time partitions of any table stay few,
// and the done entries past the window are forgotten while the load goes on.
func TestShortPartitionsUnderLoad(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.node("l1", "--history", loadWindow.String(), "--workers", "8")
	watch := w.conn()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	maxParts := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			n, err := timePartitions(ctx, watch)
			if err != nil {
				t.Errorf("watch partitions: %v", err)
				return
			}
			mu.Lock()
			maxParts = max(maxParts, n)
			mu.Unlock()
		}
	}()

	// A delivery every 1/loadRate s, posted by whichever sender is free.
	jobs := make(chan int, loadRate)
	var got acked
	var unavailable, other, behind atomic.Int64
	for range loadSenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range jobs {
				code, id, err := w.post(d, "hist/Ok", fmt.Sprintf("load-%06d", n), n)
				switch {
				case err != nil:
					t.Errorf("post %d: %v", n, err)
				case code == 202:
					got.add("hist/Ok", id)
				case code == 503:
					unavailable.Add(1)
				default:
					other.Add(1)
				}
			}
		}()
	}
	start := time.Now()
	tick := time.NewTicker(time.Second / loadRate)
	for n := 0; time.Since(start) < loadRun; n++ {
		<-tick.C
		select {
		case jobs <- n:
		default:
			behind.Add(1) // every sender busy and the backlog full
		}
	}
	tick.Stop()
	close(jobs)
	close(stop)
	wg.Wait()
	end := time.Now()

	acks := got.of("hist/Ok")
	t.Logf("posted for %v: %d answered 202 (%.0f/s), %d answered 503, %d answered otherwise, %d not sent (senders behind); "+
		"at most %d time partitions a table", end.Sub(start).Round(time.Second), len(acks),
		float64(len(acks))/end.Sub(start).Seconds(), unavailable.Load(), other.Load(), behind.Load(), maxParts)
	if unavailable.Load() > 0 || other.Load() > 0 {
		t.Errorf("intake refused %d deliveries with 503 and %d otherwise, want every one answered 202", unavailable.Load(), other.Load())
	}
	// Half the planned load at least, or the partitions were not put to
	// the test. Not 90 %: with both cores busy (a full CI run beside other
	// work) the senders fell behind and 80 % were sent, all answered 202.
	if want := int(loadRun.Seconds()) * loadRate / 2; len(acks) < want {
		t.Errorf("%d deliveries answered 202, want at least %d: the load was not steady", len(acks), want)
	}
	if maxParts > maxPartitions {
		t.Errorf("a table had %d time partitions, want at most %d", maxParts, maxPartitions)
	}

	// The done entries acknowledged more than the window and two
	// partitions' widths before the end are forgotten.
	var old []string
	for _, a := range acks {
		if a.at.Before(end.Add(-loadWindow - 20*time.Second)) {
			old = append(old, a.id)
		}
	}
	// Each is forgotten by the first pass after it is done; the bound is
	// for a loaded machine, where the last of them run late.
	var still int64
	var statuses string
	testkit.WaitForReport(t, 120*time.Second, testkit.Every(500*time.Millisecond, func() bool {
		if err := watch.QueryRow(ctx, `SELECT count(*), COALESCE(string_agg(DISTINCT status, ','), '') FROM touba.entries
			WHERE queue_id = ANY ($1)`, old).Scan(&still, &statuses); err != nil {
			t.Fatal(err)
		}
		return still == 0
	}), fmt.Sprintf("the %d done entries past the window forgotten", len(old)), func() {
		t.Errorf("%d of %d entries past the window are still there (status %s)", still, len(old), statuses)
	})
}
