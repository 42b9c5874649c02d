package fairness_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/internal/testkit"
)

// SIGKILL floods of the sharing cases of issue 43 (share_test.go): a
// paused trigger's runs handed back at a later step, a circuit on a later
// step closing with runs held on it, a later-step binding shared with a
// trigger that starts on it. The daemon is killed while runs are held, and
// at the crash point just after a lease took a held run; restarted, every
// entry ends done and the remote saw every effect applied once, or twice
// only when its first call was answered before the kill (the call in flight
// is sent again under its idempotency key).

// effectRemote answers after delay, with status, once its gate (if any)
// is open, and counts the calls it answered 2xx per Idempotency-Key (the
// effect id): the effects applied, as a deduplicating remote sees them.
type effectRemote struct {
	srv    *httptest.Server
	delay  atomic.Int64 // nanoseconds
	status atomic.Int64
	conns  atomic.Int64 // open connections
	gate   chan struct{}
	done   chan struct{}

	mu      sync.Mutex
	applied map[string]int
}

func newEffectRemote(t *testing.T, delay time.Duration, status int, gated bool) *effectRemote {
	r := &effectRemote{done: make(chan struct{}), applied: map[string]int{}}
	r.status.Store(int64(status))
	r.delay.Store(int64(delay))
	if gated {
		r.gate = make(chan struct{})
	}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		if r.gate != nil {
			select {
			case <-r.gate:
			case <-r.done:
				return
			case <-req.Context().Done():
				return
			}
		}
		select {
		case <-time.After(time.Duration(r.delay.Load())):
		case <-r.done:
			return
		case <-req.Context().Done():
			return
		}
		st := int(r.status.Load())
		if st < 300 {
			r.mu.Lock()
			r.applied[req.Header.Get("Idempotency-Key")]++
			r.mu.Unlock()
		}
		w.WriteHeader(st)
		io.WriteString(w, `{"stored": true}`)
	}))
	r.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			r.conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			r.conns.Add(-1)
		}
	}
	r.srv.Start()
	t.Cleanup(func() { close(r.done); r.srv.CloseClientConnections(); r.srv.Close() })
	return r
}

// settled returns the effects applied once the killed daemon's
// connections are closed: a request it sent before the kill may be
// answered (and applied) after the kill, and counts as applied before it.
func (r *effectRemote) settled(t *testing.T) map[string]int {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, testkit.Every(20*time.Millisecond, func() bool { return r.conns.Load() == 0 }),
		"the killed daemon's connections closed")
	return r.snapshot()
}

func (r *effectRemote) snapshot() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.applied))
	for k, v := range r.applied {
		out[k] = v
	}
	return out
}

// crashWorld is a world whose daemon is restarted, armed with a crash
// point or not, on the same files or database.
type crashWorld struct {
	*world
	args []string
	ids  []string // every entry posted, by queue id
	seen map[string]bool
}

func newCrashWorld(t *testing.T, b backend, program, manifest string, extra ...string) *crashWorld {
	w := newWorld(t, b, program, manifest)
	args := append([]string{"serve", w.program, "--manifest", w.manifest}, b.args(w.dir)...)
	args = append(args, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--admin-socket", filepath.Join(w.dir, "admin.sock"),
		"--log-level", "info")
	if _, ok := b.(*sqliteBackend); ok {
		args = append(args, "--take-over-stale-lock")
	}
	return &crashWorld{world: w, args: append(args, extra...), seen: map[string]bool{}}
}

// run starts the daemon, armed with point unless it is "". Armed, it may
// reach the point before it listens (the runs left by the last kill are
// leased at once), which killed then sees.
func (w *crashWorld) run(point string) {
	if point == "" {
		w.daemon = testkit.Start(w.t, hmacEnv, w.args...)
		return
	}
	w.daemon = testkit.StartMayDie(w.t, append(append([]string{}, hmacEnv...), crashpoint.Env+"="+point), w.args...)
}

// part is the deliveries from..n-1 of a batch.
type part struct {
	batch
	from int
}

// postEach posts the parts in turn and keeps the queue ids of the entries
// (each once); with mayDie, a post that gets no answer (the daemon killed
// at its crash point meanwhile) ends the posting and what is left, from
// that delivery on, is returned, to post to the restarted daemon: a
// delivery stored before the kill is answered 202 duplicate or 200 with
// its queue id.
func (w *crashWorld) postEach(mayDie bool, parts ...part) (rest []part) {
	w.t.Helper()
	for pi, p := range parts {
		for i := p.from; i < p.n; i++ {
			id, err := w.send(p.trigger, fmt.Sprintf("%s-%05d", p.prefix, i), fmt.Sprintf(`{"n": %d}`, i))
			if err != nil {
				if !mayDie {
					w.t.Fatal(err)
				}
				return append([]part{{p.batch, i}}, parts[pi+1:]...)
			}
			if !w.seen[id] {
				w.seen[id] = true
				w.ids = append(w.ids, id)
			}
		}
	}
	return nil
}

// send posts one delivery; an answer other than 202 or 200 fails the test,
// no answer is the error.
func (w *crashWorld) send(trigger, eventID, body string) (string, error) {
	req, err := http.NewRequest(http.MethodPost, w.daemon.URL()+"/triggers/"+trigger, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Touba-Event-Id", eventID)
	resp, err := w.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var a struct {
		QueueID string `json:"queue_id"`
		Error   struct {
			QueueID string `json:"queue_id"`
		} `json:"error"`
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return "", err
	}
	json.Unmarshal(raw, &a)
	id := a.QueueID + a.Error.QueueID
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK || id == "" {
		w.t.Fatalf("%s %s: %d %s", trigger, eventID, resp.StatusCode, raw)
	}
	return id, nil
}

// left counts the deliveries of rest.
func left(rest []part) int {
	n := 0
	for _, p := range rest {
		n += p.n - p.from
	}
	return n
}

// parts are the batches, whole.
func parts(bs ...batch) []part {
	out := make([]part, len(bs))
	for i, b := range bs {
		out[i] = part{batch: b}
	}
	return out
}

// killed waits for the armed daemon to die at its crash point.
func (w *crashWorld) killed(point string, timeout time.Duration) {
	w.t.Helper()
	if code := w.daemon.Wait(timeout); code != -1 {
		w.t.Fatalf("daemon exited %d, want killed at %s\n%s", code, point, w.daemon.Log())
	}
}

// allDone waits until every entry posted is done.
func (w *crashWorld) allDone(timeout time.Duration) {
	w.t.Helper()
	left := 0
	testkit.WaitForReport(w.t, timeout, testkit.Every(100*time.Millisecond, func() bool {
		st, err := w.backend.statuses(w.t.Context(), w.ids)
		if err != nil {
			return false
		}
		left = 0
		for _, id := range w.ids {
			if st[id] != "done" {
				left++
			}
		}
		return left == 0
	}), "every entry done after the restart", func() { w.t.Logf("%d of %d entries not done", left, len(w.ids)) })
}

// onceEach checks the remote applied want effects, each once, or twice
// when it was applied before the kill (before).
func onceEach(t *testing.T, r *effectRemote, before map[string]int, want int) {
	t.Helper()
	applied := r.snapshot()
	if len(applied) != want {
		t.Fatalf("the remote applied %d effects, want %d", len(applied), want)
	}
	again := 0
	for key, n := range applied {
		if n > 1 && before[key] == 0 {
			t.Fatalf("effect %s applied %d times, none of them before the kill: a held run was repeated", key, n)
		}
		if n > 2 {
			t.Fatalf("effect %s applied %d times", key, n)
		}
		if n > 1 {
			again++
		}
	}
	t.Logf("%d effects applied, %d of them again after the kill (their call in flight at it)", len(applied), again)
}

// testCrashPausedHeld: P (the stub, then the remote at max_concurrency 1)
// and A (the remote first). P's first call hangs at the remote's gate; its
// other runs are handed back. P is paused, the gate opened, A's runs done
// while P stays paused; the daemon is killed (SIGKILL) with P's runs held
// and paused, restarted armed at after-held-leased, P resumed: the kill
// comes as the first of P's held runs is leased; restarted again, all end
// done, each effect applied once.
func testCrashPausedHeld(t *testing.T, b backend) {
	const p, a = 20, 5
	r := newEffectRemote(t, 50*time.Millisecond, http.StatusOK, true)
	w := newCrashWorld(t, b, laterProgram("P", "A", 10, 10), stallManifest(r.srv.URL+"/r", `"max_concurrency": 1,`))
	w.run("")
	w.postEach(false, parts(batch{"fair/P", "p", p})...)
	w.heldAtLeast("trigger:fair/P", p-1, 30*time.Second)
	w.cli("triggers", "pause", "trigger:fair/P", "--reason", "issue 43")
	close(r.gate)
	w.postEach(false, parts(batch{"fair/A", "a", a})...)
	st := w.waitStatuses(w.ids[p:], 30*time.Second)
	w.daemon.Kill()
	applied := len(r.settled(t))
	t.Logf("%s: A's %d done while P paused (%v); killed with %d of P held, %d effects applied", b.name(), a, st,
		w.heldNow("trigger:fair/P"), applied)
	if applied != a+1 {
		t.Fatalf("%d effects applied while P was paused, want A's %d and the one call of P in flight at the pause", applied, a)
	}
	point := dispatcher.CrashAfterHeldLeased
	w.run(point)
	w.cli("triggers", "resume", "trigger:fair/P")
	w.killed(point, 30*time.Second)
	before := r.settled(t)
	t.Logf("%s: killed at %s with %d of P held, %d effects applied", b.name(), point, w.heldNow("trigger:fair/P"), len(before))
	w.run("")
	w.allDone(60 * time.Second)
	onceEach(t, r, before, p+a)
}

func TestCrashPausedHeldSQLite(t *testing.T)   { testCrashPausedHeld(t, newSQLite(t)) }
func TestCrashPausedHeldPostgres(t *testing.T) { testCrashPausedHeld(t, newPostgres(t)) }

// testCrashCircuitHeld: A calls the stub, then the remote, whose circuit
// opens on its failures; A's runs are handed back on it; the remote
// recovers. The daemon, armed at after-held-leased, is killed as the
// circuit's probe time comes and a held run is leased; restarted, the
// circuit (kept by the store) probes and closes, and every entry of A and
// of B (posted after the restart, the stub only) ends done, each effect
// applied once.
func testCrashCircuitHeld(t *testing.T, b backend) {
	const a, bs = 60, 10
	r := newEffectRemote(t, 20*time.Millisecond, http.StatusServiceUnavailable, false)
	w := newCrashWorld(t, b, circuitHeldProgram, stallManifest(r.srv.URL+"/a",
		`"max_concurrency": 0, "circuit": {"failure_ratio": 0.5, "min_calls": 5, "window_ms": 60000, "open_ms": 2000},`))
	point := dispatcher.CrashAfterHeldLeased
	w.run(point)
	rest := w.postEach(true, parts(batch{"fair/A", "a", a})...)
	if len(rest) == 0 {
		w.daemon.WaitLog(`"event":"circuit.open"`, circuitOpenWait)
		r.status.Store(http.StatusOK)
	} else {
		r.status.Store(http.StatusOK)
	}
	w.killed(point, 60*time.Second)
	opened := strings.Contains(w.daemon.Log(), `"event":"circuit.open"`)
	before := r.settled(t)
	t.Logf("%s: killed at %s, circuit opened %v, %d of A held, %d deliveries not posted yet, %d effects applied",
		b.name(), point, opened, w.heldNow("trigger:fair/A"), left(rest), len(before))
	if !opened {
		t.Fatal("killed before the circuit opened: no run was held on it")
	}
	w.run("")
	w.postEach(false, rest...)
	w.postEach(false, parts(batch{"fair/B", "b", bs})...)
	w.allDone(90 * time.Second)
	onceEach(t, r, before, a)
}

func TestCrashCircuitHeldSQLite(t *testing.T)   { testCrashCircuitHeld(t, newSQLite(t)) }
func TestCrashCircuitHeldPostgres(t *testing.T) { testCrashCircuitHeld(t, newPostgres(t)) }

// testCrashLaterStepShare: C (weight 10) calls the stub, then the remote
// (max_concurrency 2); A (weight 30) calls the remote first. Both are
// posted while the remote holds its calls at a gate: C's runs are handed
// back at their second step, A's wait. The daemon is killed (SIGKILL)
// so; restarted armed at after-held-leased with the gate open, it is
// killed at the first of C's held runs a lease takes at C's share;
// restarted armed at after-held with the remote's calls slowed to 2 s, at
// the first of 10 more of C handed back on the full binding; restarted
// again, every entry ends done, each effect applied once.
func testCrashLaterStepShare(t *testing.T, b backend) {
	const a, c, c2 = 40, 40, 10
	r := newEffectRemote(t, 50*time.Millisecond, http.StatusOK, true)
	w := newCrashWorld(t, b, laterProgram("C", "A", 10, 30), stallManifest(r.srv.URL+"/r", `"max_concurrency": 2,`))
	w.run("")
	w.postEach(false, parts(batch{"fair/C", "c", c}, batch{"fair/A", "a", a})...)
	w.heldAtLeast("trigger:fair/C", c-2, 30*time.Second)
	w.daemon.Kill()
	t.Logf("%s: killed with %d of C held, %d effects applied", b.name(), w.heldNow("trigger:fair/C"), len(r.settled(t)))
	close(r.gate)
	point := dispatcher.CrashAfterHeldLeased
	w.run(point)
	w.killed(point, 60*time.Second)
	t.Logf("%s: killed at %s with %d of C held, %d effects applied", b.name(), point, w.heldNow("trigger:fair/C"), len(r.settled(t)))
	r.delay.Store(int64(2 * time.Second))
	point = dispatcher.CrashAfterHeld
	w.run(point)
	rest := w.postEach(true, parts(batch{"fair/C", "c2", c2})...)
	w.killed(point, 60*time.Second)
	before := r.settled(t)
	t.Logf("%s: killed at %s with %d of C held, %d deliveries not posted yet, %d effects applied",
		b.name(), point, w.heldNow("trigger:fair/C"), left(rest), len(before))
	r.delay.Store(int64(50 * time.Millisecond))
	w.run("")
	w.postEach(false, rest...)
	w.allDone(90 * time.Second)
	onceEach(t, r, before, a+c+c2)
}

func TestCrashLaterStepShareSQLite(t *testing.T)   { testCrashLaterStepShare(t, newSQLite(t)) }
func TestCrashLaterStepSharePostgres(t *testing.T) { testCrashLaterStepShare(t, newPostgres(t)) }

// waitStatuses waits until the entries ids are all done and returns how
// many are in each state.
func (w *crashWorld) waitStatuses(ids []string, timeout time.Duration) map[string]int {
	w.t.Helper()
	count := map[string]int{}
	testkit.WaitFor(w.t, timeout, testkit.Every(50*time.Millisecond, func() bool {
		st, err := w.backend.statuses(w.t.Context(), ids)
		if err != nil {
			return false
		}
		clear(count)
		for _, id := range ids {
			count[st[id]]++
		}
		return count["done"] == len(ids)
	}), "the entries done")
	return count
}
