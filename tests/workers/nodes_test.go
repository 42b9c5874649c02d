package workers_test

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// Several nodes on one PostgreSQL database (SPEC §8) with workers
// connected to some of them (SPEC §4.3): a call is handed out only by the
// node that leased its run, to a worker connected to that node, so the
// run's lease is the call's fence; a node leases a worker binding's runs
// only while a worker connected to it has room, and a run that reaches
// the binding on a node with no such worker is handed back for a node
// that has one.

// nodeWait bounds the waits of these tests: a take-over comes a lease
// (nodeLeaseTTL) after the node stopped renewing, on a loaded machine.
const nodeWait = 90 * time.Second

// nodeLeaseTTL is the nodes' --lease-ttl: at least the binding's timeout
// (nodeTimeoutMS) plus 5 s, and short so take-overs come soon.
const (
	nodeLeaseTTL  = "8s"
	nodeTimeoutMS = 3000
)

// newNodesWorld is a world on a fresh PostgreSQL database whose nodes run
// with nodeLeaseTTL; it skips where PostgreSQL 15 is not installed.
func newNodesWorld(t *testing.T, retryMode string) *world {
	t.Helper()
	if ok, why := pgtest.Available(); !ok {
		t.Skip("PostgreSQL 15 not installed: " + why)
	}
	w := newWorld(t, pgBackend, retryMode, nodeTimeoutMS)
	w.extraFlags = []string{"--lease-ttl", nodeLeaseTTL}
	return w
}

// node starts node name on w's database, with an admin socket of its own.
func (w *world) node(name string, flags ...string) *testkit.Daemon {
	w.t.Helper()
	return w.startOn("127.0.0.1:0", filepath.Join(w.dir, name+".sock"), name, flags...)
}

// byEvent is every entry by event id, read from the database.
func (w *world) byEvent() map[string]*touba.Delivery {
	out := map[string]*touba.Delivery{}
	for _, e := range w.entries() {
		out[e.EventID] = e
	}
	return out
}

// waitEntries waits until every entry of ids has status.
func (w *world) waitEntries(ids []string, status string, what string, logs ...*testkit.Daemon) {
	w.t.Helper()
	testkit.WaitForReport(w.t, nodeWait, testkit.Every(200*time.Millisecond, func() bool {
		all := w.byEvent()
		for _, id := range ids {
			if e := all[id]; e == nil || e.Status != status {
				return false
			}
		}
		return true
	}), what, func() {
		for _, d := range logs {
			w.t.Log(d.Log())
		}
	})
}

// noWorker is what `triggers ls` on node name says of trigger's worker
// bindings with no worker.
func (w *world) noWorker(name, trigger string) []string {
	w.t.Helper()
	var ts []struct {
		TriggerRef string   `json:"trigger_ref"`
		NoWorker   []string `json:"no_worker"`
	}
	w.cliAt(filepath.Join(w.dir, name+".sock"), &ts, "triggers", "ls")
	for _, tr := range ts {
		if tr.TriggerRef == "trigger:"+trigger {
			return tr.NoWorker
		}
	}
	w.t.Fatalf("triggers ls on %s: no %s in %+v", name, trigger, ts)
	return nil
}

// eventIDs are n event ids with prefix.
func eventIDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

// TestNodesNeverTwoWorkersOnOneCall: two nodes and three workers (two on
// node A, one on node B), deliveries posted to both nodes: every call is
// run by one worker once, each effect applied once, and both nodes hand
// calls out.
func TestNodesNeverTwoWorkersOnOneCall(t *testing.T) {
	w := newNodesWorld(t, touba.RetryIdempotencyKey)
	a, b := w.node("n1", "--workers", "8"), w.node("n2", "--workers", "8")
	rec := newRecorder()
	connectTo(t, a.URL(), "a0", 4, rec.tool("a0"))
	connectTo(t, a.URL(), "a1", 4, rec.tool("a1"))
	connectTo(t, b.URL(), "b0", 4, rec.tool("b0"))
	ids := eventIDs("evt", 150)
	for i, id := range ids {
		w.sendTo([]*testkit.Daemon{a, b}[i%2], orders, id)
	}
	// Done, or a call run twice (then no need to wait on).
	testkit.WaitForReport(t, nodeWait, testkit.Every(200*time.Millisecond, func() bool {
		rec.mu.Lock()
		dup := len(rec.dup) > 0
		rec.mu.Unlock()
		if dup {
			return true
		}
		all := w.byEvent()
		return !slices.ContainsFunc(ids, func(id string) bool { return all[id] == nil || all[id].Status != touba.StatusDone })
	}), "every entry done", func() { t.Log(a.Log(), b.Log()) })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.dup) > 0 {
		t.Fatalf("calls run by two workers: %v", rec.dup)
	}
	if len(rec.callBy) != len(ids) {
		t.Errorf("%d calls run, want %d (one per entry)", len(rec.callBy), len(ids))
	}
	for id, n := range rec.effects {
		if n != 1 {
			t.Errorf("effect %s run %d times", id, n)
		}
	}
	by := map[string]int{}
	for _, name := range rec.callBy {
		by[name]++
	}
	t.Logf("calls by worker: %v", by)
	if by["a0"]+by["a1"] == 0 || by["b0"] == 0 {
		t.Errorf("calls by worker %v: want both nodes to hand calls out", by)
	}
	effects, _ := w.effects()
	for _, e := range effects {
		if e.State != touba.EffectApplied {
			t.Errorf("effect %s: %s", e.EffectID, e.State)
		}
	}
}

// TestNodeWithoutWorkerHandsRunsBack: node A, with no worker, leases the
// runs of a trigger whose first step is not a worker's and runs that step;
// at the worker step it hands each run back (no attempt spent) instead of
// keeping it, and node B, whose worker connects later, leases them and
// hands their calls out in acceptance order. A trigger whose first step is
// the worker binding is not leased by A at all. `triggers ls` on either
// node names the binding as having no worker until B's connects, then on
// neither.
func TestNodeWithoutWorkerHandsRunsBack(t *testing.T) {
	w := newNodesWorld(t, touba.RetryIdempotencyKey)
	a := w.node("n1", "--workers", "8")
	chained, direct := eventIDs("chain", 20), eventIDs("direct", 10)
	w.sendTo(a, chain, chained...)
	w.sendTo(a, orders, direct...)
	// Every chained run went past its stub step on A and was handed back
	// on the worker binding; the direct ones were never leased.
	testkit.WaitForReport(t, nodeWait, testkit.Every(200*time.Millisecond, func() bool {
		all := w.byEvent()
		for _, id := range chained {
			if e := all[id]; e == nil || e.Status != touba.StatusPending || e.ErrorCode != touba.EWorkerUnavailable {
				return false
			}
		}
		return true
	}), "node A to hand every chained run back", func() { t.Log(a.Log()) })
	for _, id := range direct {
		if e := w.byEvent()[id]; e.Status != touba.StatusPending || e.Attempts != 0 {
			t.Errorf("%s: %s after %d attempts; want pending, never leased", id, e.Status, e.Attempts)
		}
	}
	b := w.node("n2", "--workers", "8")
	if got := w.noWorker("n1", orders); !slices.Equal(got, []string{postTool}) {
		t.Errorf("triggers ls on A before any worker: no_worker %v, want [%s]", got, postTool)
	}
	rec := newRecorder()
	connectTo(t, b.URL(), "b0", 1, rec.tool("b0"))
	// A has no worker of its own, but B has one: the binding has a worker,
	// whichever node is asked.
	testkit.WaitFor(t, nodeWait, testkit.Every(250*time.Millisecond, func() bool {
		return len(w.noWorker("n1", orders)) == 0 && len(w.noWorker("n2", orders)) == 0
	}), "triggers ls on both nodes to see B's worker")
	w.waitEntries(append(slices.Clone(chained), direct...), touba.StatusDone, "node B's worker to run every call", a, b)
	all := w.byEvent()
	for _, id := range chained {
		if e := all[id]; e.Attempts != 1 {
			t.Errorf("%s: %d attempts, want 1 (waiting for a worker spends none)", id, e.Attempts)
		}
	}
	rec.mu.Lock()
	got := slices.Clone(rec.events)
	rec.mu.Unlock()
	// One call in flight: the worker took them one by one, each trigger's
	// in acceptance order (the two triggers share the worker by weight).
	for _, want := range [][]string{chained, direct} {
		mine := slices.DeleteFunc(slices.Clone(got), func(id string) bool { return !slices.Contains(want, id) })
		if !slices.Equal(mine, want) {
			t.Errorf("calls run in the order\n%v\nwant\n%v", mine, want)
		}
	}
}

// TestNodeFrozenWithCallHandedOut: node A hands a call to its worker and
// is frozen (SIGSTOP) before the answer reaches it. Past A's lease, node B
// takes the entry over (the call's effect unknown), and under
// idempotency_key hands the call, with the same effect id and a new call
// id, to a worker connected to B, which applies it. Then the first worker's
// answer is posted to A and A resumed: it is refused (409) or kept as an
// effect.late_outcome event only; the effect stays B's, applied once.
func TestNodeFrozenWithCallHandedOut(t *testing.T) {
	w := newNodesWorld(t, touba.RetryIdempotencyKey)
	a, b := w.node("n1", "--workers", "4"), w.node("n2", "--workers", "4")
	// The first worker is this test, on A: it takes the call and holds it.
	calls := make(chan []map[string]any, 1)
	go func() { calls <- take(t, a, token, postTool, 1, 60000) }()
	metricsA := "http://" + metricsAddr.FindStringSubmatch(a.Log())[1] + "/metrics"
	testkit.WaitFor(t, nodeWait, testkit.Every(50*time.Millisecond, func() bool {
		return strings.Contains(metricsPage(t, metricsA), `touba_worker_connected{tool_ref="tool:wk/Post"} 1`)
	}), "the take on node A to be open")
	w.sendTo(b, orders, "evt-1") // accepted by B, which has no worker: A leases it
	var call map[string]any
	select {
	case got := <-calls:
		if len(got) != 1 {
			t.Fatalf("take on A: %d calls", len(got))
		}
		call = got[0]
	case <-time.After(nodeWait):
		t.Fatalf("node A handed no call out\n%s", a.Log())
	}
	ctx := call["context"].(map[string]any)
	effectID, firstCall := ctx["effect"].(map[string]any)["effect_id"].(string), ctx["call_id"].(string)
	a.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { a.Signal(syscall.SIGCONT) })

	// Two workers on B (three in all); neither may have the call before
	// A's lease is past.
	rec := newRecorder()
	connectTo(t, b.URL(), "b0", 4, rec.tool("b0"))
	connectTo(t, b.URL(), "b1", 4, rec.tool("b1"))
	w.waitEntries([]string{"evt-1"}, touba.StatusDone, "node B to take the entry over and its worker to apply the call", b)
	rec.mu.Lock()
	byB := maps.Clone(rec.callBy)
	effectsB := maps.Clone(rec.effects)
	rec.mu.Unlock()
	if len(byB) != 1 || effectsB[effectID] != 1 || byB[firstCall] != "" {
		t.Fatalf("B's workers ran calls %v of effects %v; want one call of %s other than A's %s", byB, effectsB, effectID, firstCall)
	}

	// The first worker's answer reaches A only once A runs again.
	answered := make(chan string, 1)
	go func() {
		status, body := post(t, a.URL()+"/workers/v1/answer", token, answerDoc(call))
		answered <- fmt.Sprintf("%d %s", status, body)
	}()
	// The answer's request must be in A's socket before A resumes: give
	// the client a moment to write it (no signal from a frozen process).
	time.Sleep(200 * time.Millisecond)
	a.Signal(syscall.SIGCONT)
	var late string
	select {
	case late = <-answered:
	case <-time.After(nodeWait):
		t.Fatal("node A never answered the late answer")
	}
	t.Logf("late answer to A: %s", late)
	if !strings.HasPrefix(late, "200 ") && !(strings.HasPrefix(late, "409 ") && strings.Contains(late, touba.EWorkerCallNotHeld)) {
		t.Fatalf("late answer to A: %s; want 200 (kept as a late outcome) or 409 WorkerCallNotHeld", late)
	}
	// A's run of the call ends (the answer, or the call's timeout): a late
	// report, kept as an event only.
	testkit.WaitForReport(t, nodeWait, testkit.Every(200*time.Millisecond, func() bool {
		_, events := w.effects()
		return slices.ContainsFunc(events[effectID], func(e touba.EffectEvent) bool { return e.State == "late_outcome" })
	}), "node A's end of the call kept as a late outcome", func() { t.Log(a.Log()) })
	// A works on afterwards, and what it runs is its own.
	w.sendTo(a, orders, "evt-2")
	w.waitEntries([]string{"evt-2"}, touba.StatusDone, "the next delivery to be run", a, b)

	effects, events := w.effects()
	var applied int
	for _, e := range events[effectID] {
		if e.State == touba.EffectApplied {
			applied++
		}
	}
	var eff touba.Effect
	for _, e := range effects {
		if e.EffectID == effectID {
			eff = e
		}
	}
	if eff.State != touba.EffectApplied || eff.ReceiptRef != "r:"+effectID || applied != 1 {
		t.Errorf("effect %s: %s, receipt %q, %d applied events; want applied once, with B's worker's receipt r:%s\n%+v",
			effectID, eff.State, eff.ReceiptRef, applied, effectID, events[effectID])
	}
	var states []string
	var takeOver bool
	for _, e := range events[effectID] {
		states = append(states, e.State)
		takeOver = takeOver || e.State == touba.EffectUnknown && strings.Contains(e.Detail, "the lease of node n1 expired")
	}
	if !takeOver {
		t.Errorf("no unknown event naming node n1's lease: %+v", events[effectID])
	}
	t.Logf("events of %s: %v", effectID, states)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.effects[effectID] != 1 {
		t.Errorf("effect %s run %d times by B's workers", effectID, rec.effects[effectID])
	}
}

// TestNodeKilledWithCallsHandedOut: node A's worker holds calls (it
// recorded them at its remote side and never answers) when A is killed
// (SIGKILL) and the worker with it. Past A's lease node B takes the
// entries over and its worker gets each call again under the same effect
// id; nothing accepted is lost, and no call the journal recorded applied
// before the kill is sent again.
func TestNodeKilledWithCallsHandedOut(t *testing.T) {
	w := newNodesWorld(t, touba.RetryIdempotencyKey)
	a, b := w.node("n1", "--workers", "8"), w.node("n2", "--workers", "8")
	remote := filepath.Join(w.dir, "remote.jsonl")
	hangA, hangB := filepath.Join(w.dir, "hang-a"), filepath.Join(w.dir, "hang-b")
	// A's worker holds every call it runs, and a held call timed out is
	// handed to it again about every 3 s: with 8 in flight its slots were
	// full of the first ones' repeats in 6 s, and a delivery that B leased
	// first (B has no worker then: it waits 5 s and hands it back) reached
	// A's worker after that, taken ahead and never run, so never recorded.
	// 64 in flight hold about 40 s of repeats, time enough for every
	// delivery's first call to reach them.
	wa := startWorkerAt(t, a.URL(), remote, hangA, 64)
	wb := startWorkerAt(t, b.URL(), remote, hangB, 8)
	applied := eventIDs("ok", 10)
	for i, id := range applied {
		w.sendTo([]*testkit.Daemon{a, b}[i%2], orders, id)
	}
	w.waitEntries(applied, touba.StatusDone, "the first deliveries applied", a, b)
	// Only A's worker now: it takes the next calls and holds them.
	wb.kill()
	if err := os.WriteFile(hangA, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	held := eventIDs("held", 5)
	w.sendTo(b, orders, held...)
	// Every held delivery's call at A's worker (a call that timed out
	// meanwhile, timeout_ms 3 s on a loaded box, is handed to it again
	// under the same effect: a line more).
	testkit.WaitFor(t, nodeWait, func() bool {
		at := map[string]bool{}
		for _, l := range readRemote(t, remote) {
			at[l.EventID] = true
		}
		return len(at) == len(applied)+len(held)
	}, "A's worker to hold the calls")
	a.Kill()
	wa.kill()
	wb2 := startWorkerAt(t, b.URL(), remote, hangB, 8)
	w.waitEntries(append(slices.Clone(applied), held...), touba.StatusDone, "node B to run the held calls again", b)
	stop := func(d *testkit.Daemon) {
		d.Signal(syscall.SIGTERM)
		if code := d.Wait(60 * time.Second); code != 0 {
			t.Fatalf("exit code %d after SIGTERM\n%s", code, d.Log())
		}
	}
	stop(b)
	byEvent := map[string][]remoteLine{}
	for _, l := range readRemote(t, remote) {
		byEvent[l.EventID] = append(byEvent[l.EventID], l)
	}
	for _, id := range applied {
		if n := len(byEvent[id]); n != 1 {
			t.Errorf("%s (applied before the kill) sent %d times", id, n)
		}
	}
	for _, id := range held {
		ls := byEvent[id]
		calls, pids, oneEffect := map[string]bool{}, map[int]bool{}, true
		for _, l := range ls {
			calls[l.CallID] = true
			pids[l.PID] = true
			oneEffect = oneEffect && l.EffectID == ls[0].EffectID
		}
		if len(ls) < 2 || !oneEffect || len(calls) != len(ls) || !pids[wa.cmd.Process.Pid] || !pids[wb2.cmd.Process.Pid] {
			t.Errorf("%s (held by A's worker at the kill) sent as %+v; want by A's worker, then B's, one effect, a call id each", id, ls)
		}
	}
	effects, events := w.effects()
	if len(effects) != len(applied)+len(held) {
		t.Fatalf("%d effects, want %d", len(effects), len(applied)+len(held))
	}
	for _, e := range effects {
		var n int
		for _, ev := range events[e.EffectID] {
			if ev.State == touba.EffectApplied {
				n++
			}
		}
		if e.State != touba.EffectApplied || n != 1 {
			t.Errorf("effect %s: %s with %d applied events", e.EffectID, e.State, n)
		}
	}
}

// TestNodeWorkerLeftRunsGoToAnother: node A leases runs for the room of
// its worker's take; the take ends having taken only the first calls (a
// take answers as soon as it has any) and no other take comes to A. The
// rest wait in A for a take a few seconds, end unsent and are handed back,
// and node B, whose worker connects meanwhile, leases them: every call is
// applied once, none by two workers.
func TestNodeWorkerLeftRunsGoToAnother(t *testing.T) {
	w := newNodesWorld(t, touba.RetryIdempotencyKey)
	a, b := w.node("n1", "--workers", "64"), w.node("n2", "--workers", "8")
	ids := eventIDs("evt", 50)
	calls := make(chan []map[string]any, 1)
	go func() { calls <- take(t, a, token, postTool, len(ids), 60000) }()
	metricsA := "http://" + metricsAddr.FindStringSubmatch(a.Log())[1] + "/metrics"
	testkit.WaitFor(t, nodeWait, testkit.Every(50*time.Millisecond, func() bool {
		return strings.Contains(metricsPage(t, metricsA), `touba_worker_connected{tool_ref="tool:wk/Post"} 1`)
	}), "the take on node A to be open")
	w.sendTo(b, orders, ids...)
	var got []map[string]any
	select {
	case got = <-calls:
	case <-time.After(nodeWait):
		t.Fatalf("node A handed no call out\n%s", a.Log())
	}
	t.Logf("the take on A got %d of %d calls", len(got), len(ids))
	for _, c := range got {
		if status, body := post(t, a.URL()+"/workers/v1/answer", token, answerDoc(c)); status != http.StatusOK {
			t.Fatalf("answer: %d %s", status, body)
		}
	}
	rec := newRecorder()
	connectTo(t, b.URL(), "b0", 8, rec.tool("b0"))
	w.waitEntries(ids, touba.StatusDone, "every entry done", a, b)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(got)+len(rec.callBy) != len(ids) || len(rec.dup) > 0 {
		t.Errorf("%d calls taken on A and %d on B (dups %v); want %d in all, one each", len(got), len(rec.callBy), rec.dup, len(ids))
	}
	for id, n := range rec.effects {
		if n != 1 {
			t.Errorf("effect %s run %d times", id, n)
		}
	}
	for _, c := range got {
		id := c["context"].(map[string]any)["effect"].(map[string]any)["effect_id"].(string)
		if rec.effects[id] != 0 {
			t.Errorf("effect %s, applied through A, run again by B's worker", id)
		}
	}
	if len(got) == len(ids) {
		t.Log("the take on A got every call: no run waited in A this time")
	}
}
