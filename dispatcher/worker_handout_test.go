package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/sqlite/journal"
	"github.com/touba/touba-trigger/worker"
)

// countingJournal counts the journal's writes before a call: each is a
// commit of its own (or a share of one).
type countingJournal struct {
	*journal.Journal
	prepare, dispatch, prepareDispatched atomic.Int32
}

func (c *countingJournal) Prepare(ctx context.Context, p touba.EffectPrepare) (*touba.Effect, error) {
	c.prepare.Add(1)
	return c.Journal.Prepare(ctx, p)
}

func (c *countingJournal) Dispatch(ctx context.Context, scope, effectID, callID string) error {
	c.dispatch.Add(1)
	return c.Journal.Dispatch(ctx, scope, effectID, callID)
}

func (c *countingJournal) DispatchRequest(ctx context.Context, scope, effectID, callID, request string) error {
	c.dispatch.Add(1)
	return c.Journal.DispatchRequest(ctx, scope, effectID, callID, request)
}

func (c *countingJournal) PrepareDispatched(ctx context.Context, p touba.EffectPrepare) (*touba.Effect, error) {
	c.prepareDispatched.Add(1)
	return c.Journal.PrepareDispatched(ctx, p)
}

func (c *countingJournal) counts() string {
	return fmt.Sprintf("prepare %d, dispatch %d, prepare+dispatched %d", c.prepare.Load(), c.dispatch.Load(), c.prepareDispatched.Load())
}

// plainQueue is the queue without its planned leases: a run then calls
// its worker binding whether or not a take is open, so its call waits in
// the Hub (for up to 5 s) until a take hands it out.
type plainQueue struct{ dispatcher.Queue }

// newWorkerWorld is a world whose toolW is a worker binding (with circuit,
// a JSON value) over a Hub, its dispatcher on a plainQueue and a
// countingJournal.
func newWorkerWorld(t *testing.T, circuit string) (*world, *worker.Hub, *countingJournal) {
	hub := worker.NewHub(nil)
	t.Cleanup(hub.Close)
	manifest := `{"manifest_version": "touba-manifest-v1", "bindings": {"` + toolW + `": {
	  "handler": {"kind": "worker", "token": {"env": "WK_TOKEN"}}, "grants": [], "timeout_ms": 20000, "circuit": ` + circuit + `,
	  "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`
	w := newWorld(t, program(t, 3, step{"post", toolW, map[string]any{"n": ref("/event/body/n")}}), manifest,
		map[string]string{"WK_TOKEN": "wk-token"}, false)
	w.stubs.Workers = hub
	cj := &countingJournal{Journal: w.j}
	w.d = dispatcher.New(plainQueue{w.q}, w.st, cj, w.config(), dispatcher.Options{Workers: 3,
		PollInterval: 10 * time.Millisecond, Log: zerolog.Nop(), Waits: w.waits()})
	hub.Room = w.d.Notify
	if err := w.d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return w, hub, cj
}

// TestWorkerCallPreparedAtHandOut: a worker binding's external write is
// journaled only when a take hands its call out, prepared and dispatched
// in one write (one commit, shared with the take's other calls), and the
// request the worker gets carries the attempt that write counted. While
// the call waits for a take nothing is journaled. A call whose prepare
// finds its effect applied already is left out of the take, never handed
// out, and its run goes on with the journal's result.
func TestWorkerCallPreparedAtHandOut(t *testing.T) {
	w, hub, cj := newWorkerWorld(t, "null")
	waiting := func() bool { return hub.Stats()[toolW].Waiting == 1 }

	qid := w.enqueue(trigName, `{"n": 1}`, nil)
	testkit.WaitFor(t, waitFor, testkit.Every(time.Millisecond, waiting), "the call to wait for a worker")
	if got := cj.counts(); got != "prepare 0, dispatch 0, prepare+dispatched 0" {
		t.Fatalf("a call waiting for a worker was journaled: %s", got)
	}
	if eff := w.effect(qid, "post"); eff != nil {
		t.Fatalf("a call waiting for a worker has an effect on record: %+v", eff)
	}
	bodies := hub.Take(context.Background(), []string{toolW}, 5, time.Second)
	if len(bodies) != 1 {
		t.Fatalf("the take handed out %d calls, want 1", len(bodies))
	}
	if got := cj.counts(); got != "prepare 0, dispatch 0, prepare+dispatched 1" {
		t.Fatalf("journal writes of a hand-out: %s, want one prepare+dispatched", got)
	}
	var req handler.Request
	if err := json.Unmarshal(bodies[0], &req); err != nil {
		t.Fatal(err)
	}
	if e := req.Context.Effect; e == nil || e.EffectID != qid+":post" || e.Attempt != 1 {
		t.Fatalf("request's effect %+v, want %s:post at attempt 1", e, qid)
	}
	if eff := w.effect(qid, "post"); eff == nil || eff.State != touba.EffectDispatched || eff.CallID != req.Context.CallID {
		t.Fatalf("effect once handed out: %+v, want dispatched by call %s", eff, req.Context.CallID)
	}
	doc := fmt.Sprintf(`{"call_id": %q, "ok": true, "output": {"posted": 1},
		"effect_receipt": {"effect_id": %q, "fingerprint": %q, "outcome": "applied", "receipt_ref": "r-1"}}`,
		req.Context.CallID, req.Context.Effect.EffectID, req.Context.Effect.Fingerprint)
	if err := hub.Answer(req.Context.CallID, func(string) bool { return true }, []byte(doc)); err != nil {
		t.Fatal(err)
	}
	wantEntry(t, w.wait(qid, touba.StatusDone), touba.StatusDone, "", 1)

	// An effect found applied at hand-out: recorded while its call waited
	// (as a run elsewhere could have), so the prepare refuses it.
	qid2 := w.enqueue(trigName, `{"n": 2}`, nil)
	testkit.WaitFor(t, waitFor, testkit.Every(time.Millisecond, waiting), "the second call to wait for a worker")
	if err := w.seed(qid2, "post", fingerprint(t, toolW, map[string]any{"n": 2}), touba.RetryIdempotencyKey, true,
		touba.EffectApplied, json.RawMessage(`{"posted": "before"}`)); err != nil {
		t.Fatal(err)
	}
	if bodies := hub.Take(context.Background(), []string{toolW}, 5, 200*time.Millisecond); len(bodies) != 0 {
		t.Fatalf("the take handed out a call whose effect was applied: %s", bodies)
	}
	wantEntry(t, w.wait(qid2, touba.StatusDone), touba.StatusDone, "", 1)
	if eff := w.effect(qid2, "post"); eff == nil || eff.State != touba.EffectApplied || eff.CallID != "seed-post" {
		t.Fatalf("effect %+v, want the seeded one applied", eff)
	}
	if st := hub.Stats()[toolW]; st.HandedOut != 1 || st.Waiting != 0 {
		t.Fatalf("hub %+v, want one call handed out and none waiting", st)
	}
}

// TestWorkerCallRefusedAtHandOutIsNoCallForTheCircuit: a call whose
// prepare is refused at the hand-out never reached a worker, so the
// binding's circuit does not count it: one failed call of min_calls 2
// leaves the circuit closed, where counting the refused call as a success
// would make 1 failure in 2 calls, over failure_ratio 0.4, and open it.
func TestWorkerCallRefusedAtHandOutIsNoCallForTheCircuit(t *testing.T) {
	w, hub, _ := newWorkerWorld(t, `{"failure_ratio": 0.4, "min_calls": 2, "window_ms": 600000, "open_ms": 600000}`)
	waiting := func() bool { return hub.Stats()[toolW].Waiting == 1 }
	qid := w.enqueue(trigName, `{"n": 1}`, nil)
	testkit.WaitFor(t, waitFor, testkit.Every(time.Millisecond, waiting), "the call to wait for a worker")
	bodies := hub.Take(context.Background(), []string{toolW}, 5, time.Second)
	if len(bodies) != 1 {
		t.Fatalf("the take handed out %d calls, want 1", len(bodies))
	}
	var req handler.Request
	if err := json.Unmarshal(bodies[0], &req); err != nil {
		t.Fatal(err)
	}
	e := req.Context.Effect
	doc := fmt.Sprintf(`{"call_id": %q, "ok": false, "error": {"code": %q, "message": "down", "details": {
		"effect_receipt": {"effect_id": %q, "fingerprint": %q, "outcome": "not_applied", "receipt_ref": "r-1"}}}}`,
		req.Context.CallID, touba.EHandlerFailed, e.EffectID, e.Fingerprint)
	if err := hub.Answer(req.Context.CallID, func(string) bool { return true }, []byte(doc)); err != nil {
		t.Fatal(err)
	}
	// The run is retried; its effect is found applied meanwhile (as a
	// run elsewhere could have), so the retry's prepare refuses it.
	testkit.WaitFor(t, waitFor, testkit.Every(time.Millisecond, waiting), "the retry's call to wait for a worker")
	if state := circuitState(w.d); state != touba.CircuitClosed {
		t.Fatalf("circuit %s after one failed call of min_calls 2", state)
	}
	if err := w.seed(qid, "post", e.Fingerprint, touba.RetryIdempotencyKey, true, touba.EffectApplied,
		json.RawMessage(`{"posted": "elsewhere"}`)); err != nil {
		t.Fatal(err)
	}
	if bodies := hub.Take(context.Background(), []string{toolW}, 5, 200*time.Millisecond); len(bodies) != 0 {
		t.Fatalf("the take handed out a call whose effect was applied: %s", bodies)
	}
	wantEntry(t, w.wait(qid, touba.StatusDone), touba.StatusDone, "", 2)
	if state := circuitState(w.d); state != touba.CircuitClosed {
		t.Fatalf("circuit %s: the call refused at the hand-out was counted", state)
	}
}
