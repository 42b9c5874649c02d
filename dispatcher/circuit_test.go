package dispatcher_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/internal/testkit"
)

// fakeClock is the dispatcher's clock in the circuit tests: it moves only
// when the test says. It starts a day back, so retry times it computes
// are already due for the queue, which reads the real clock.
type fakeClock struct{ t atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.t.Store(time.Now().Add(-24 * time.Hour).UnixNano())
	return c
}
func (c *fakeClock) now() time.Time          { return time.Unix(0, c.t.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.t.Add(int64(d)) }

// failingRemote answers 503 while failing is set, 200 otherwise, and
// counts every request that reaches it.
type failingRemote struct {
	srv     *httptest.Server
	calls   atomic.Int32
	failing atomic.Bool
}

func newFailingRemote(t *testing.T) *failingRemote {
	r := &failingRemote{}
	r.failing.Store(true)
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.calls.Add(1)
		if r.failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, `{"stored": true}`)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// circuitManifest is webhookManifest under reconcile (a 5xx ends the call
// at once: one request per call) with a circuit.
func circuitManifest(t *testing.T, url string, minCalls int, openMS int) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(webhookManifest(t, url, touba.RetryReconcile)), &m); err != nil {
		t.Fatal(err)
	}
	m["bindings"].(map[string]any)[toolW].(map[string]any)["circuit"] = map[string]any{
		"failure_ratio": 0.5, "min_calls": minCalls, "window_ms": 60000, "open_ms": openMS}
	return mustJSON(t, m)
}

type transitions struct {
	mu  sync.Mutex
	seq []string
}

func (tr *transitions) add(_, _, to string) {
	tr.mu.Lock()
	tr.seq = append(tr.seq, to)
	tr.mu.Unlock()
}
func (tr *transitions) list() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.seq...)
}

func circuitState(d *dispatcher.Dispatcher) string {
	for _, c := range d.Circuits() {
		if c.ToolRef == toolW {
			return c.State
		}
	}
	return touba.CircuitClosed
}

// A remote answering 503 opens the binding's circuit after min_calls
// calls; while it is open not one request reaches the remote, and the
// runs held meanwhile wait (leased once, attempt 1, no effect prepared).
// Once open_ms passed on the injected clock exactly one call probes: a
// failed probe opens it again (again nothing reaches the remote), a
// successful one, when the remote recovered, closes it and the held runs
// go on, each having spent exactly one attempt.
func TestCircuitOpensProbesAndCloses(t *testing.T) {
	const minCalls, openMS = 3, 60_000
	remote := newFailingRemote(t)
	clk := newFakeClock()
	var tr transitions
	w := newWorld(t, program(t, 3, step{"bill", toolW, map[string]any{"data": 1}}), circuitManifest(t, remote.srv.URL, minCalls, openMS),
		map[string]string{"HOOK_KEY": "circuit-test-hook-secret"}, false)
	w.d = dispatcher.New(w.q, w.st, w.j, w.config(), dispatcher.Options{Workers: 4, PollInterval: 5 * time.Millisecond,
		Now: clk.now, Log: zerolog.Nop(), OnCircuit: tr.add})
	if err := w.d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}

	// min_calls failures: each parks (reconcile), the last opens the circuit.
	for range minCalls {
		qid := w.enqueue(trigName, `{}`, nil)
		wantEntry(t, w.wait(qid, touba.StatusParked), touba.StatusParked, touba.EEffectReconciliationRequired, 1)
	}
	if got := circuitState(w.d); got != touba.CircuitOpen {
		t.Fatalf("circuit %s after %d failed calls, want open", got, minCalls)
	}
	if got := remote.calls.Load(); got != minCalls {
		t.Fatalf("remote saw %d calls before the circuit opened, want %d", got, minCalls)
	}

	// Two runs arrive while it is open: the lease takes neither (SPEC
	// §2.2, holds take nothing): they wait pending, in no worker.
	a, b := w.enqueue(trigName, `{"n": 1}`, nil), w.enqueue(trigName, `{"n": 2}`, nil)

	// open_ms passes, the remote still fails: one probe, then open again.
	clk.advance(openMS * time.Millisecond)
	parked := func() int {
		n := 0
		for _, q := range []string{a, b} {
			if w.entry(q).Status == touba.StatusParked {
				n++
			}
		}
		return n
	}
	testkit.WaitFor(t, waitFor, func() bool {
		return remote.calls.Load() == minCalls+1 && circuitState(w.d) == touba.CircuitOpen && parked() == 1
	}, "one failed probe (its run parked) and the circuit open again")
	if got := remote.calls.Load(); got != minCalls+1 {
		t.Fatalf("remote saw %d calls after the first open_ms, want exactly one probe", got-minCalls)
	}
	// The run not probed was never leased: no attempt, no effect.
	for _, q := range []string{a, b} {
		if e := w.entry(q); e.Status == touba.StatusPending && (e.Attempts != 0 || len(w.effects(q)) != 0) {
			t.Fatalf("held entry %s: attempts %d, effects %+v; want none while the circuit holds it", q, e.Attempts, w.effects(q))
		}
	}

	// The remote recovers; after open_ms the probe succeeds and closes it.
	remote.failing.Store(false)
	clk.advance(openMS * time.Millisecond)
	var done *touba.Delivery
	for _, q := range []string{a, b} {
		if e := w.entry(q); e.Status == touba.StatusPending {
			done = w.wait(q, touba.StatusDone)
		}
	}
	if done == nil || done.Attempts != 1 {
		t.Fatalf("the run held through two open periods: %+v, want done at attempt 1", done)
	}
	if got := circuitState(w.d); got != touba.CircuitClosed {
		t.Fatalf("circuit %s after a successful probe, want closed", got)
	}
	if got := remote.calls.Load(); got != minCalls+2 {
		t.Fatalf("remote saw %d calls in all, want %d (min_calls, two probes, nothing else)", got, minCalls+2)
	}
	want := []string{touba.CircuitOpen, touba.CircuitProbing, touba.CircuitOpen, touba.CircuitProbing, touba.CircuitClosed}
	if got := tr.list(); len(got) != len(want) || func() bool {
		for i := range got {
			if got[i] != want[i] {
				return true
			}
		}
		return false
	}() {
		t.Fatalf("circuit transitions %v, want %v", got, want)
	}

	// Closed again, calls flow: a new run reaches the remote at once.
	wantEntry(t, w.wait(w.enqueue(trigName, `{"n": 3}`, nil), touba.StatusDone), touba.StatusDone, "", 1)
}
