package dispatcher

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunnersReusedAndBounded: jobs handed as the leaser hands them (each
// under one of --workers slots) all run, on no more goroutines than
// --workers, each reused; a stop ends the idle ones.
func TestRunnersReusedAndBounded(t *testing.T) {
	const workers, jobs = 3, 500
	d := &Dispatcher{opts: Options{Workers: workers}, stop: make(chan struct{}), jobs: make(chan job)}
	slots := make(chan struct{}, workers)
	var ran sync.WaitGroup
	var going, most atomic.Int32
	for range jobs {
		slots <- struct{}{}
		ran.Add(1)
		d.hand(func() {
			defer ran.Done()
			defer func() { <-slots }()
			n := going.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			going.Add(-1)
		})
	}
	ran.Wait()
	if n := d.runners.Load(); n < 1 || n > workers {
		t.Fatalf("%d runners alive for %d jobs under %d slots, want 1 to %d", n, jobs, workers, workers)
	}
	if m := most.Load(); m > workers {
		t.Fatalf("%d jobs ran at once under %d slots", m, workers)
	}
	close(d.stop)
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("idle runners did not end at the stop")
	}
	if n := d.runners.Load(); n != 0 {
		t.Fatalf("%d runners alive after the stop", n)
	}
}
