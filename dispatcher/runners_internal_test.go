package dispatcher

import (
	"sync"
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
	for range jobs {
		slots <- struct{}{}
		ran.Add(1)
		d.hand(func() {
			defer ran.Done()
			defer func() { <-slots }()
		})
	}
	ran.Wait()
	// Runners end only at the stop: those alive are all that were made.
	if n := d.runners.Load(); n < 1 || n > workers {
		t.Fatalf("%d runners made for %d jobs under %d slots, want 1 to %d", n, jobs, workers, workers)
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

// TestHandAtTheStop: with --workers runners alive and none waiting (one
// between its job and its wait), hand waits for one; a stop meanwhile
// makes a runner for the job instead, which runs it.
func TestHandAtTheStop(t *testing.T) {
	d := &Dispatcher{opts: Options{Workers: 1}, stop: make(chan struct{}), jobs: make(chan job)}
	d.runners.Store(1) // a runner that has released its slot and not reached its wait
	ran := make(chan struct{})
	handed := make(chan struct{})
	go func() {
		d.hand(func() { close(ran) })
		close(handed)
	}()
	select {
	case <-handed:
		t.Fatal("hand made a runner beyond --workers instead of waiting for one")
	case <-ran:
		t.Fatal("the job ran on a runner beyond --workers")
	case <-time.After(50 * time.Millisecond):
	}
	close(d.stop)
	for _, c := range []chan struct{}{handed, ran} {
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatal("after the stop, hand did not return or the job did not run")
		}
	}
	d.wg.Wait()
}
