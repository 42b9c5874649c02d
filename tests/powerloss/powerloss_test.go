// Package powerloss_test cuts the power under the real touba-trigger
// binary. A SIGKILL keeps the kernel's page cache, so the crash tests
// cannot see a missing fsync; here the daemon's three SQLite files (and
// the journal's lock) live on a FUSE filesystem that keeps every write not
// followed by an fsync of its file in memory and throws it away at a cut
// (lazyfs_test.go says what it models). Under load (concurrent intake,
// dispatch to a counting webhook remote) the test cuts the power at random
// moments, restarts the daemon, and checks after every cut: every delivery
// answered 202 is in the queue; every effect the remote saw is journaled
// dispatched or later; no applied record seen before a cut is lost; the
// files pass integrity_check; and no effect was written twice.
//
// TOUBA_POWERLOSS_SEED replays a run's cut schedule (the intervals between
// start and cut; the daemon's own timing still varies), and
// TOUBA_POWERLOSS_CUTS sets the number of cuts (50 by default).
package powerloss_test

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Environment of a run (also readable as -args flags would be, but an
// environment variable passes through `go test ./...` unchanged).
const (
	seedEnv = "TOUBA_POWERLOSS_SEED"
	cutsEnv = "TOUBA_POWERLOSS_CUTS"
)

// TestPowerLoss is the CI run: at least 50 cuts, none may break a promise.
func TestPowerLoss(t *testing.T) {
	seed, cuts := seedAndCuts(t, 50)
	w := newWorld(t, false)
	s := w.run(seed, cuts)
	t.Logf("seed %d: %d cuts, %d deliveries answered 202 all checked after each cut, %d effects seen by the remote checked, %d applied records carried across cuts; the remote saw %d writes",
		seed, s.cuts, s.deliveries, s.effects, s.applied, s.writes)
	if s.found != nil {
		t.Fatalf("seed %d (replay with %s=%d): after cut %d: %v", seed, seedEnv, seed, s.cuts, s.found)
	}
	if s.deliveries == 0 || s.effects == 0 {
		t.Fatalf("seed %d: no load: %d deliveries, %d effects", seed, s.deliveries, s.effects)
	}
	// The daemon still starts, and stops cleanly, after the last cut.
	d := w.start()
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(60 * time.Second); code != 0 {
		t.Fatalf("clean stop after the last cut: exit code %d\n%s", code, d.Log())
	}
}

// TestPowerLossCatchesMissingFsync proves TestPowerLoss can fail: with
// synchronous=OFF (the daemon's test-only switch) nothing the daemon
// commits reaches the disk before a cut, and the checks must say that
// acknowledged deliveries were lost. It stops at the first cut that finds
// it (at most 10).
func TestPowerLossCatchesMissingFsync(t *testing.T) {
	seed, _ := seedAndCuts(t, 10)
	w := newWorld(t, true)
	s := w.run(seed, 10)
	if s.found == nil || len(s.found.lostDeliveries) == 0 {
		t.Fatalf("seed %d: synchronous=OFF lost nothing in %d cuts (%d deliveries): the power-loss test cannot see a missing fsync (found %v)",
			seed, s.cuts, s.deliveries, s.found)
	}
	t.Logf("seed %d, synchronous=OFF: cut %d found %v (of %d deliveries answered 202)", seed, s.cuts, s.found, s.deliveries)
}

func seedAndCuts(t *testing.T, defaultCuts int) (uint64, int) {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(seedEnv); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, v, err)
		}
	}
	cuts := defaultCuts
	if v := os.Getenv(cutsEnv); v != "" {
		var err error
		if cuts, err = strconv.Atoi(v); err != nil || cuts < 1 {
			t.Fatalf("%s=%q: want a positive number", cutsEnv, v)
		}
	}
	t.Logf("power-loss seed %d (replay: %s=%d), %d cuts", seed, seedEnv, seed, cuts)
	return seed, cuts
}

// stats is what a run checked.
type stats struct {
	cuts, deliveries, effects, applied, writes int
	found                                      *findings // the first cut's broken promises, nil if none
}

// senders is how many clients post deliveries at once.
const senders = 4

// run starts the daemon, loads it, cuts the power after a random 50-400 ms
// and checks, cuts times or until a check finds a broken promise (later
// checks would only repeat it).
func (w *world) run(seed uint64, cuts int) stats {
	w.t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x706f7765726c6f73))
	applied := map[string]bool{}
	var s stats
	for s.cuts < cuts {
		interval := time.Duration(50+rng.IntN(351)) * time.Millisecond
		d := w.start()
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); w.intake(ctx, d, s.cuts, senders) }()

		timer := time.NewTimer(interval)
		<-timer.C
		// Read what is applied, then cut: every record seen must survive.
		ids, err := w.appliedNow()
		if err != nil {
			stop()
			w.t.Fatalf("cut %d: reading the journal while the daemon runs: %v\n%s", s.cuts+1, err, d.Log())
		}
		for _, id := range ids {
			applied[id] = true
		}
		if err := d.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
			stop()
			w.t.Fatalf("cut %d: the daemon was gone before the cut: %v\n%s", s.cuts+1, err, d.Log())
		}
		d.Wait(10 * time.Second)
		stop()
		wg.Wait()
		w.d.cut()
		s.cuts++

		f := w.check(applied)
		s.deliveries, s.effects, s.applied = len(w.ackedCopy()), f.effects, len(applied)
		s.writes = 0
		for _, n := range w.remote.writes() {
			s.writes += n
		}
		if f.any() {
			s.found = f
			return s
		}
	}
	return s
}
