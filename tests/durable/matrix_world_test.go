package durable_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// The reload matrix's world (matrix_test.go): an order flow whose three
// tools are webhooks served by the test itself, so that a test holds a
// call in flight (an entry running across a reload) and makes one park
// (a 500 from a reconcile binding is an unknown outcome).
const (
	mOrder    = "trigger:matrix/Order"
	mPayment  = "trigger:matrix/Payment"
	mPayment2 = "trigger:matrix/Payment2"
	mRefund   = "trigger:matrix/Refund"
	mVoid     = "trigger:matrix/Void"
	mTick     = "trigger:matrix/Tick"
	mReserve  = "tool:matrix/Reserve"
	mShip     = "tool:matrix/Ship"
)

// matrixProgram is the base program: an order reserves, waits for its
// payment, then ships; a refund (by order) or a void (by customer)
// cancels it.
func matrixProgram() program {
	hook := func(ref string) map[string]any {
		return map[string]any{"ref": ref, "source": map[string]any{"kind": "webhook", "event_id": map[string]any{"json_pointer": "/id"}},
			"steps": []any{}}
	}
	order := hook(mOrder)
	order["cancel_on"] = []any{
		map[string]any{"trigger": mRefund, "match": ref("/event/body/order"), "on": "/body/order"},
		map[string]any{"trigger": mVoid, "match": ref("/event/body/customer"), "on": "/body/customer"},
	}
	order["retry"] = map[string]any{"max_attempts": 3, "initial_interval_ms": 100, "max_interval_ms": 200}
	order["steps"] = []any{
		map[string]any{"id": "reserve", "tool": mReserve, "input": map[string]any{"mode": ref("/event/body/mode"), "order": ref("/event/body/order")}},
		map[string]any{"id": "paid", "wait_for": map[string]any{"trigger": mPayment, "match": ref("/event/body/order"), "on": "/body/order"}},
		map[string]any{"id": "ship", "tool": mShip, "input": map[string]any{"order": ref("/event/body/order")}},
	}
	return program{"air_version": "touba-air-v1", "triggers": []any{order, hook(mPayment), hook(mPayment2), hook(mRefund), hook(mVoid)}}
}

func ref(pointer string) map[string]any { return map[string]any{"$ref": pointer} }

// removeStep drops step id from the trigger ref.
func (p program) removeStep(ref, id string) {
	var keep []any
	for _, s := range p.trigger(ref)["steps"].([]any) {
		if s.(map[string]any)["id"] != id {
			keep = append(keep, s)
		}
	}
	p.trigger(ref)["steps"] = keep
}

// matrixRemote is the webhook remote of Reserve and Ship. A Reserve call
// whose input mode is "park" answers 500 (the binding's retry_mode is
// reconcile: the outcome is unknown and the entry parks); the first call
// with mode "block" waits for release before it answers. Every other call
// answers 200 with a body that is no protocol response (applied).
type matrixRemote struct {
	srv     *httptest.Server
	entered chan string // the queue id of each call that blocks
	release chan struct{}
	once    sync.Once

	mu      sync.Mutex
	calls   []remoteCall
	blocked map[string]bool
}

// remoteCall is one call that reached the remote.
type remoteCall struct {
	Tool, QueueID, EffectID string
	Input                   map[string]any
}

func newMatrixRemote(t *testing.T) *matrixRemote {
	r := &matrixRemote{entered: make(chan string, 4), release: make(chan struct{}), blocked: map[string]bool{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() { r.free(); r.srv.Close() })
	return r
}

// free lets the blocked call answer.
func (r *matrixRemote) free() { r.once.Do(func() { close(r.release) }) }

func (r *matrixRemote) serve(w http.ResponseWriter, req *http.Request) {
	var in struct {
		ToolRef string         `json:"tool_ref"`
		Input   map[string]any `json:"input"`
		Context struct {
			QueueID string `json:"queue_id"`
			Effect  struct {
				EffectID string `json:"effect_id"`
			} `json:"effect"`
		} `json:"context"`
	}
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.calls = append(r.calls, remoteCall{Tool: in.ToolRef, QueueID: in.Context.QueueID, EffectID: in.Context.Effect.EffectID, Input: in.Input})
	block := in.Input["mode"] == "block" && !r.blocked[in.Context.QueueID]
	r.blocked[in.Context.QueueID] = true
	r.mu.Unlock()
	switch {
	case in.ToolRef == mReserve && in.Input["mode"] == "park":
		http.Error(w, "the reservation system cannot tell", http.StatusInternalServerError)
		return
	case block:
		r.entered <- in.Context.QueueID
		select {
		case <-r.release:
		case <-req.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"written": true}`)
}

// effects are the effect ids of the calls of tool for qid, in order.
func (r *matrixRemote) effects(tool, qid string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.calls {
		if c.Tool == tool && c.QueueID == qid {
			out = append(out, c.EffectID)
		}
	}
	return out
}

// matrixManifest binds Reserve and Ship to the remote, reconcile: an
// unknown outcome parks.
func matrixManifest(url, secretFile string) string {
	b := func(path string) string {
		return fmt.Sprintf(`{"handler": {"kind": "webhook", "options": {"url": %q, "timeout_sec": 60},
		  "credentials": {"hmac_secret": {"file": %q}}},
		  "grants": [], "timeout_ms": 60000, "effect_contract": {"kind": "external_write", "retry_mode": "reconcile"}}`, url+path, secretFile)
	}
	return fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {%q: %s, %q: %s}}`,
		mReserve, b("/reserve"), mShip, b("/ship"))
}

// newMatrixWorld is a world running p against its own remote.
func newMatrixWorld(t *testing.T, p program) (*world, *matrixRemote) {
	t.Helper()
	dir := t.TempDir()
	w := &world{t: t, dir: dir, program: filepath.Join(dir, "program.air.json"), manifest: filepath.Join(dir, "touba.manifest.json"),
		queue: filepath.Join(dir, "q.sqlite"), state: filepath.Join(dir, "s.sqlite"), journal: filepath.Join(dir, "j.sqlite"),
		sock: filepath.Join(dir, "admin.sock")}
	r := newMatrixRemote(t)
	secret := filepath.Join(dir, "hmac-secret")
	if err := os.WriteFile(secret, []byte("matrix-hmac-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.manifest, []byte(matrixManifest(r.srv.URL, secret)), 0o600); err != nil {
		t.Fatal(err)
	}
	w.write(p)
	return w, r
}

func orderBody(id, mode, order, customer string) string {
	return fmt.Sprintf(`{"id": %q, "mode": %q, "order": %q, "customer": %q}`, id, mode, order, customer)
}

// cells are the matrix's four entries, one in each state at the reload.
type cells struct {
	pending, running, waiting, parked string
}

// setUp puts one order in each state: parked (its reserve unknown),
// waiting (for its payment), running (its reserve call held at the
// remote), and pending (posted once the order trigger is paused).
func setUp(w *world, r *matrixRemote) cells {
	t := w.t
	t.Helper()
	var c cells
	c.parked = w.post(mOrder, "", orderBody("o-park", "park", "o-park", "c-park"))
	if e := w.waitStatus(c.parked, touba.StatusParked); e.ErrorCode != touba.EEffectReconciliationRequired {
		t.Fatalf("the parked order: %s %s, want %s", e.ErrorCode, e.ErrorMessage, touba.EEffectReconciliationRequired)
	}
	c.waiting = w.post(mOrder, "", orderBody("o-wait", "ok", "o-wait", "c-wait"))
	w.waitStatus(c.waiting, touba.StatusWaiting)
	c.running = w.post(mOrder, "", orderBody("o-run", "block", "o-run", "c-run"))
	select {
	case got := <-r.entered:
		if got != c.running {
			t.Fatalf("the remote holds a call of %s, want %s", got, c.running)
		}
	case <-time.After(waitLong):
		t.Fatalf("the running order's reserve never reached the remote")
	}
	w.cliJSON(nil, "triggers", "pause", mOrder, "--reason", "matrix")
	c.pending = w.post(mOrder, "", orderBody("o-pend", "ok", "o-pend", "c-pend"))
	return c
}

// status fails unless qid is in status (and, when code is not empty, has
// that code and a message holding each of about), and returns it.
func (w *world) status(qid, status, code string, about ...string) shown {
	w.t.Helper()
	e := w.show(qid)
	if e.Status != status || code != "" && e.ErrorCode != code {
		w.t.Fatalf("entry %s (%s) is %s %s %q, want %s %s", qid, e.EventID, e.Status, e.ErrorCode, e.ErrorMessage, status, code)
	}
	for _, s := range about {
		if !strings.Contains(e.ErrorMessage, s) {
			w.t.Fatalf("entry %s (%s): %q does not name %q", qid, e.EventID, e.ErrorMessage, s)
		}
	}
	return e
}
