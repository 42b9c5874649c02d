package fairness_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// weightsProgram: triggers A (weight 10) and C (weight 30), each calling
// its own binding, so the remote tells their calls apart by URL path.
const weightsProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:fair/A", "source": {"kind": "webhook"}, "dispatch": {"weight": 10},
   "steps": [{"id": "call", "tool": "tool:fair/RemoteA", "input": {"n": {"$ref": "/event/body/n"}}}]},
  {"ref": "trigger:fair/C", "source": {"kind": "webhook"}, "dispatch": {"weight": 30},
   "steps": [{"id": "call", "tool": "tool:fair/RemoteC", "input": {"n": {"$ref": "/event/body/n"}}}]}]}`

// weightsManifest binds A's step to url/a and C's to url/c. The contract is
// none: no journal write per call, so the workers, not the store, are what
// the two triggers share.
func weightsManifest(r *remote) string {
	binding := func(url string) string {
		return fmt.Sprintf(`{
    "handler": {"kind": "webhook", "options": {"url": %q, "timeout_sec": 30},
                "credentials": {"hmac_secret": {"env": "FAIR_HMAC"}}},
    "effect_contract": {"kind": "none"}}`, url)
	}
	return fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:fair/RemoteA": %s,
  "tool:fair/RemoteC": %s}}`, binding(r.url("/a")), binding(r.url("/c")))
}

// The weights test's numbers. 16 workers on a remote taking 50 ms a call
// run at most 320 calls a second; shared 1:3, C runs at most 240 a second
// and A 80, so over the warm-up and the window (11 s) C needs at most 2,640
// of its backlog and A 880 (even an unfair 1:1 share needs at most 1,760):
// both backlogs outlast the window, which the test checks.
const (
	weightsWorkers  = 16
	weightsDelay    = 50 * time.Millisecond
	weightsBacklogA = 2000
	weightsBacklogC = 3000
	weightsWarmUp   = time.Second
	weightsWindow   = 10 * time.Second
	weightsRatio    = 3.0 // 30 / 10
	weightsSlack    = 0.2 // ±20%
)

// testWeights (SPEC §2.1 dispatch): with both triggers backlogged and the
// workers the bottleneck, the workers are shared in proportion to the
// weights, so C completes 3 times as many runs as A over a window (±20%).
//
// The remote holds every call at its gate until both backlogs are posted,
// so neither trigger drains while the other is still being queued: the 16
// workers wait at the gate, the rest of both backlogs waits in the queue.
// Counting starts 1 s after the gate opens.
func testWeights(t *testing.T, b backend) {
	r := newRemote(t, weightsDelay, http.StatusOK, true)
	w := newWorld(t, b, weightsProgram, weightsManifest(r))
	w.start("--workers", fmt.Sprint(weightsWorkers))
	w.postAll(postClients, batch{"fair/A", "a", weightsBacklogA}, batch{"fair/C", "c", weightsBacklogC})
	r.open()
	opened := time.Now()

	// The window is measured time, not a wait for a condition: its ends
	// are fixed instants after the gate opened.
	at := func(d time.Duration) (a, c int) {
		timer := time.NewTimer(time.Until(opened.Add(d)))
		defer timer.Stop()
		<-timer.C
		return r.count("/a"), r.count("/c")
	}
	a0, c0 := at(weightsWarmUp)
	a1, c1 := at(weightsWarmUp + weightsWindow)
	da, dc := a1-a0, c1-c0
	t.Logf("%s: in %v after a %v warm-up: A %d runs (%.0f/s), C %d runs (%.0f/s); by the window's end A %d of %d, C %d of %d",
		b.name(), weightsWindow, weightsWarmUp, da, float64(da)/weightsWindow.Seconds(), dc, float64(dc)/weightsWindow.Seconds(),
		a1, weightsBacklogA, c1, weightsBacklogC)
	if a1 >= weightsBacklogA || c1 >= weightsBacklogC {
		t.Fatalf("a backlog ran out within the window (A %d of %d, C %d of %d): the share is not measured",
			a1, weightsBacklogA, c1, weightsBacklogC)
	}
	if da < 50 {
		t.Fatalf("A ran %d times in %v: too few to measure a share (C ran %d)", da, weightsWindow, dc)
	}
	ratio := float64(dc) / float64(da)
	lo, hi := weightsRatio*(1-weightsSlack), weightsRatio*(1+weightsSlack)
	t.Logf("%s: C/A = %.2f (want %.1f, between %.2f and %.2f)", b.name(), ratio, weightsRatio, lo, hi)
	if ratio < lo || ratio > hi {
		t.Errorf("C/A = %.2f over the window (A %d, C %d), want between %.2f and %.2f (weights 30 and 10)",
			ratio, da, dc, lo, hi)
	}
}

func TestWeightsShareWorkersSQLite(t *testing.T) { testWeights(t, newSQLite(t)) }

func TestWeightsShareWorkersPostgres(t *testing.T) { testWeights(t, newPostgres(t)) }
