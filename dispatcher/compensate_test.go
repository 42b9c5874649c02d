package dispatcher_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/manifest"
	"github.com/touba/touba-trigger/sqlite/journal"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
	"github.com/touba/touba-trigger/trigger"
)

const compProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:comp/Orders", "source": {"kind": "webhook"},
   "steps": [
     {"id": "read", "tool": "tool:comp/Read", "input": {"id": {"$ref": "/event/body/id"}}},
     {"id": "bill", "tool": "tool:comp/Bill", "input": {"order": {"$ref": "/event/body"}, "seen": {"$ref": "/steps/read/output"}}},
     {"id": "note", "tool": "tool:comp/Note", "input": {"id": {"$ref": "/event/body/id"}}}]}]}`

const compManifest = `{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:comp/Read": {"handler": {"kind": "accounting_stub"}, "effect_contract": {"kind": "none"}},
  "tool:comp/Bill": {"handler": {"kind": "accounting_stub"}, "compensation": {"supported": true},
    "effect_contract": {"kind": "external_write", "retry_mode": "reconcile"}},
  "tool:comp/Note": {"handler": {"kind": "accounting_stub"},
    "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`

// compWorld is a queue, a state file and a journal with a dispatcher
// running the program above on accounting stubs.
type compWorld struct {
	q     *queue.Queue
	st    *state.State
	j     *journal.Journal
	d     *dispatcher.Dispatcher
	cfg   *dispatcher.Config
	stubs *dispatcher.Stubs
}

func newCompWorld(tb testing.TB) *compWorld {
	tb.Helper()
	ctx := context.Background()
	dir := tb.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			tb.Fatal(err)
		}
		return p
	}
	p, err := trigger.LoadProgram(write("program.air.json", compProgram))
	if err != nil {
		tb.Fatal(err)
	}
	m, err := manifest.Load(write("touba.manifest.json", compManifest))
	if err != nil {
		tb.Fatal(err)
	}
	res, err := m.Resolve(func(string) (string, bool) { return "", false })
	if err != nil {
		tb.Fatal(err)
	}
	w := &compWorld{stubs: &dispatcher.Stubs{}}
	cfg, err := dispatcher.NewConfig(p, m, res, true, w.stubs, dispatcher.Outbound{}, zerolog.Nop())
	if err != nil {
		tb.Fatal(err)
	}
	if w.j, err = journal.Open(ctx, filepath.Join(dir, "j.sqlite"), journal.Options{}); err != nil {
		tb.Fatal(err)
	}
	if w.q, err = queue.Open(ctx, filepath.Join(dir, "q.sqlite"), queue.Options{}); err != nil {
		tb.Fatal(err)
	}
	if w.st, err = state.Open(ctx, filepath.Join(dir, "s.sqlite"), state.Options{}); err != nil {
		tb.Fatal(err)
	}
	w.cfg = cfg
	w.d = dispatcher.New(w.q, w.st, w.j, cfg, dispatcher.Options{Workers: 2, PollInterval: 10 * time.Millisecond})
	if err := w.d.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		w.d.Close(5 * time.Second)
		w.q.Close()
		w.st.Close()
		w.j.Close()
	})
	return w
}

// run enqueues body and waits until its entry is done.
func (w *compWorld) run(tb testing.TB, eventID, body string) *touba.Delivery {
	tb.Helper()
	ctx := context.Background()
	r, err := w.q.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:comp/Orders", EventID: eventID,
		Digest: dedupe.Digest([]byte(body)), Body: []byte(body)})
	if err != nil {
		tb.Fatal(err)
	}
	w.d.Notify()
	var e *touba.Delivery
	testkit.WaitFor(tb, 30*time.Second, func() bool {
		var err error
		if e, err = w.q.Get(ctx, r.QueueID); err != nil {
			tb.Fatal(err)
		}
		if e.Status == touba.StatusFailed || e.Status == touba.StatusParked {
			tb.Fatalf("entry %s is %s (%s), want done", e.QueueID, e.Status, e.ErrorCode)
		}
		return e.Status == touba.StatusDone
	}, "entry "+r.QueueID+" to be done")
	return e
}

func (w *compWorld) compensate(tb testing.TB, e *touba.Delivery, stepID string) (*touba.Compensation, error) {
	tb.Helper()
	ctx := context.Background()
	orig, err := w.j.Get(ctx, e.QueueID, e.QueueID+":"+stepID)
	if err != nil || orig == nil {
		tb.Fatalf("effect of %s: %v", stepID, err)
	}
	steps, err := w.st.Steps(ctx, e.QueueID)
	if err != nil {
		tb.Fatal(err)
	}
	return dispatcher.Compensate(ctx, w.cfg, w.j, e, steps, orig)
}

func TestCompensateIsADistinctEffect(t *testing.T) {
	w := newCompWorld(t)
	e := w.run(t, "evt-1", `{"id": 42, "total": "9.50"}`)
	bill := w.stubs.Stub("tool:comp/Bill")
	before := bill.Calls()

	c, err := w.compensate(t, e, "bill")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.State, touba.EffectApplied; got != want {
		t.Fatalf("compensation state=%s, want %s (%s %s)", got, want, c.ErrorCode, c.Message)
	}
	if got, want := c.CompensationID, e.QueueID+":bill:compensate"; got != want {
		t.Fatalf("compensation id=%s, want %s", got, want)
	}
	if got, want := bill.Calls(), before+1; got != want {
		t.Fatalf("stub calls=%d, want %d", got, want)
	}
	// The handler saw the original input: the stub echoes it as payload.
	var out struct {
		Payload struct {
			Order struct {
				ID int `json:"id"`
			} `json:"order"`
			Seen json.RawMessage `json:"seen"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(c.Output, &out); err != nil || out.Payload.Order.ID != 42 || len(out.Payload.Seen) == 0 {
		t.Fatalf("compensation output %s does not carry the original input (%v)", c.Output, err)
	}

	ctx := context.Background()
	orig, _ := w.j.Get(ctx, e.QueueID, e.QueueID+":bill")
	comp, _ := w.j.Get(ctx, e.QueueID, c.CompensationID)
	if orig.State != touba.EffectApplied || orig.Operation != touba.OperationInvoke {
		t.Fatalf("original is %s/%s, want applied/invoke", orig.State, orig.Operation)
	}
	if comp == nil || comp.State != touba.EffectApplied || comp.Operation != touba.OperationCompensate {
		t.Fatalf("compensation effect %+v, want applied/compensate", comp)
	}

	// A second command reads the compensation back: no second call.
	again, err := w.compensate(t, e, "bill")
	if err != nil || !again.Already || again.State != touba.EffectApplied {
		t.Fatalf("second compensation: %v %+v", err, again)
	}
	if got, want := bill.Calls(), before+1; got != want {
		t.Fatalf("stub calls=%d after a second compensate, want %d", got, want)
	}
}

func TestCompensateRefusals(t *testing.T) {
	w := newCompWorld(t)
	e := w.run(t, "evt-2", `{"id": 7}`)
	calls := func() int {
		return w.stubs.Stub("tool:comp/Bill").Calls() + w.stubs.Stub("tool:comp/Note").Calls()
	}
	before := calls()

	// A binding that does not declare compensation support.
	if _, err := w.compensate(t, e, "note"); touba.ErrorCode(err) != touba.ECompensationNotSupported {
		t.Fatalf("compensate note: %v, want %s", err, touba.ECompensationNotSupported)
	}
	// The body is gone (retention): the input cannot be rebuilt.
	purged := *e
	purged.Body = nil
	ctx := context.Background()
	orig, _ := w.j.Get(ctx, e.QueueID, e.QueueID+":bill")
	steps, _ := w.st.Steps(ctx, e.QueueID)
	if _, err := dispatcher.Compensate(ctx, w.cfg, w.j, &purged, steps, orig); touba.ErrorCode(err) != touba.ECompensationInputUnavailable {
		t.Fatalf("compensate with the body purged: %v, want %s", err, touba.ECompensationInputUnavailable)
	}
	// Another body under the same entry would send another input.
	other := *e
	other.Body = []byte(`{"id": 8}`)
	if _, err := dispatcher.Compensate(ctx, w.cfg, w.j, &other, steps, orig); touba.ErrorCode(err) != touba.ECompensationInputUnavailable {
		t.Fatalf("compensate with another body: %v, want %s", err, touba.ECompensationInputUnavailable)
	}
	// Only an applied effect is compensated.
	unknown := *orig
	unknown.State = touba.EffectUnknown
	if _, err := dispatcher.Compensate(ctx, w.cfg, w.j, e, steps, &unknown); touba.ErrorCode(err) != touba.EEffectNotCompensable {
		t.Fatalf("compensate an unknown effect: %v, want %s", err, touba.EEffectNotCompensable)
	}
	if got := calls(); got != before {
		t.Fatalf("a refused compensation called a handler (%d calls, want %d)", got, before)
	}
}
