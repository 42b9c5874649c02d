package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/worker"
)

// A take whose worker goes away (its request's context ends: a clean
// stop, a closed connection) while it gathers hands out nothing: the call
// it picked was not journaled yet, so it waits again, and the next take
// hands it out, journaled once. Handed out to nobody, it would have been
// dispatched and unknown at its timeout (parked under none and
// reconcile), never sent.
func TestTakeEndedWhileGatheringPutsItsCallsBack(t *testing.T) {
	const ref = "tool:t/Post"
	hub := worker.NewHub(nil)
	defer hub.Close()
	worker.SetGatherFor(hub, time.Minute)
	r := worker.NewRunner(hub, worker.Spec{Ref: ref, Token: "t", Timeout: 10 * time.Second})
	var hooked atomic.Int32
	res := make(chan *handler.Result, 1)
	req := &handler.Request{Protocol: "touba-handler-v1", Operation: "invoke", ToolRef: ref, Input: json.RawMessage(`{}`),
		Context: handler.Context{QueueID: "q-01", CallID: "c-01"}}
	r.Reserve("q-02") // another run leased for the take's room, on its way: the take gathers
	go func() { res <- r.Call(context.Background(), req, func() error { hooked.Add(1); return nil }) }()
	waiting := func(n int) func() bool {
		return testkit.Every(time.Millisecond, func() bool { return hub.Stats()[ref].Waiting == n })
	}
	testkit.WaitFor(t, 5*time.Second, waiting(1), "the call waiting")
	ctx, cancel := context.WithCancel(context.Background())
	took := make(chan [][]byte, 1)
	go func() { took <- hub.Take(ctx, []string{ref}, 5, time.Minute) }()
	testkit.WaitFor(t, 5*time.Second, waiting(0), "the take gathering")
	cancel()
	if bodies := <-took; len(bodies) != 0 || hooked.Load() != 0 {
		t.Fatalf("a take whose worker went away handed out %d calls, journaled %d", len(bodies), hooked.Load())
	}
	testkit.WaitFor(t, 5*time.Second, waiting(1), "the call waiting again")

	worker.SetGatherFor(hub, 0)
	bodies := hub.Take(context.Background(), []string{ref}, 5, time.Second)
	if len(bodies) != 1 || hooked.Load() != 1 {
		t.Fatalf("the next take handed out %d calls, journaled %d; want 1 and 1", len(bodies), hooked.Load())
	}
	var got struct {
		Context struct {
			CallID string `json:"call_id"`
		} `json:"context"`
	}
	if err := json.Unmarshal(bodies[0], &got); err != nil || got.Context.CallID != "c-01" {
		t.Fatalf("handed out %s (%v)", bodies[0], err)
	}
	if err := hub.Answer("c-01", func(string) bool { return true }, []byte(`{"ok": true, "output": {}}`)); err != nil {
		t.Fatal(err)
	}
	if out := <-res; !out.Dispatched || out.Outcome == touba.EffectNotApplied {
		t.Fatalf("the call answered ended %s (dispatched %v): %v", out.Outcome, out.Dispatched, out.Err)
	}
}

// A call whose input alone is over max_payload_bytes is refused unsent
// before it waits for a take: nothing is journaled for it.
func TestInputOverMaxPayloadNeverJournaled(t *testing.T) {
	const ref = "tool:t/Post"
	hub := worker.NewHub(nil)
	defer hub.Close()
	r := worker.NewRunner(hub, worker.Spec{Ref: ref, Token: "t", Timeout: time.Second, MaxPayload: 64})
	req := &handler.Request{Protocol: "touba-handler-v1", Operation: "invoke", ToolRef: ref,
		Input:   json.RawMessage(`{"text":"` + strings.Repeat("x", 100) + `"}`),
		Context: handler.Context{QueueID: "q-01", CallID: "c-01"}}
	var hooked atomic.Int32
	out := r.Call(context.Background(), req, func() error { hooked.Add(1); return nil })
	// The outcome is the dispatcher's to name (no effect yet: not_applied).
	if hooked.Load() != 0 || out.Dispatched || out.Outcome == touba.EffectUnknown ||
		out.Err == nil || out.Err.Code != touba.EHandlerPayloadTooLarge {
		t.Fatalf("journaled %d times, ended %s (dispatched %v): %v", hooked.Load(), out.Outcome, out.Dispatched, out.Err)
	}
	if n := hub.Stats()[ref].Waiting; n != 0 {
		t.Fatalf("%d calls waiting, want none", n)
	}
}
