package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/worker"
)

// TestTakeJournalsItsCallsAtOnce: the dispatched events of the calls one
// take hands out are written at once, so the journal's group commit puts
// them in one sync instead of one each (a take of 16 calls one after the
// other cost 16 syncs and halved a worker's calls per second). Each hook
// here returns only once every call's hook has started: a take that
// journals its calls one by one hands none of them out.
func TestTakeJournalsItsCallsAtOnce(t *testing.T) {
	const ref, n = "tool:t/Post", 8
	hub := worker.NewHub(nil)
	defer hub.Close()
	r := worker.NewRunner(hub, worker.Spec{Ref: ref, Token: "t", Timeout: time.Minute})
	var mu sync.Mutex
	started := 0
	all := make(chan struct{})
	barrier := func() error {
		mu.Lock()
		if started++; started == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("the other calls of the take were not journaled meanwhile")
		}
	}
	results := make(chan *handler.Result, n)
	for i := range n {
		req := &handler.Request{Protocol: "touba-handler-v1", Operation: "invoke", ToolRef: ref, Input: json.RawMessage(`{}`),
			Context: handler.Context{QueueID: fmt.Sprintf("q-%02d", i), CallID: fmt.Sprintf("c-%02d", i)}}
		go func() { results <- r.Call(context.Background(), req, barrier) }()
	}
	testkit.WaitFor(t, 10*time.Second, testkit.Every(time.Millisecond, func() bool { return hub.Stats()[ref].Waiting == n }),
		"every call waiting for a worker")
	bodies := hub.Take(context.Background(), []string{ref}, n, 0)
	if len(bodies) != n {
		t.Fatalf("the take handed out %d of %d calls", len(bodies), n)
	}
	// In acceptance order still.
	for i, b := range bodies {
		var req handler.Request
		if err := json.Unmarshal(b, &req); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("c-%02d", i); req.Context.CallID != want {
			t.Errorf("call %d of the take is %s, want %s", i, req.Context.CallID, want)
		}
		doc := fmt.Sprintf(`{"call_id": %q, "ok": true, "output": {}}`, req.Context.CallID)
		if err := hub.Answer(req.Context.CallID, func(string) bool { return true }, []byte(doc)); err != nil {
			t.Errorf("answer %s: %v", req.Context.CallID, err)
		}
	}
	for range n {
		if res := <-results; !res.OK {
			t.Errorf("call ended %+v", res.Err)
		}
	}
}

// TestTakeWaitsForRunsLeasedForIt: a take that found one call waiting
// while another run leased for its room is on its way to its call waits
// for that call too, and answers both at once: one journal commit and one
// answer instead of two takes. Without a run on its way it answers at
// once (the first take here, before any run is reserved).
func TestTakeWaitsForRunsLeasedForIt(t *testing.T) {
	const ref = "tool:t/Post"
	hub := worker.NewHub(nil)
	defer hub.Close()
	// Long enough that the take cannot answer by the bound alone.
	worker.SetGatherFor(hub, time.Minute)
	r := worker.NewRunner(hub, worker.Spec{Ref: ref, Token: "t", Timeout: time.Minute})
	results := make(chan *handler.Result, 3)
	call := func(i int) {
		req := &handler.Request{Protocol: "touba-handler-v1", Operation: "invoke", ToolRef: ref, Input: json.RawMessage(`{}`),
			Context: handler.Context{QueueID: fmt.Sprintf("q-%02d", i), CallID: fmt.Sprintf("c-%02d", i)}}
		go func() { results <- r.Call(context.Background(), req, func() error { return nil }) }()
	}
	answer := func(bodies [][]byte) {
		for _, b := range bodies {
			var req handler.Request
			if err := json.Unmarshal(b, &req); err != nil {
				t.Fatal(err)
			}
			doc := fmt.Sprintf(`{"call_id": %q, "ok": true, "output": {}}`, req.Context.CallID)
			if err := hub.Answer(req.Context.CallID, func(string) bool { return true }, []byte(doc)); err != nil {
				t.Fatal(err)
			}
		}
	}
	waiting := func(n int) func() bool {
		return testkit.Every(time.Millisecond, func() bool { return hub.Stats()[ref].Waiting == n })
	}

	call(0)
	testkit.WaitFor(t, 10*time.Second, waiting(1), "the first call waiting")
	if bodies := hub.Take(context.Background(), []string{ref}, 5, time.Minute); len(bodies) != 1 {
		t.Fatalf("a take with nothing on its way handed out %d calls, want 1 at once", len(bodies))
	} else {
		answer(bodies)
	}

	r.Reserve("q-02") // leased for the take's room, not yet at its call
	call(1)
	testkit.WaitFor(t, 10*time.Second, waiting(1), "the second call waiting")
	took := make(chan [][]byte, 1)
	go func() { took <- hub.Take(context.Background(), []string{ref}, 5, time.Minute) }()
	// The take holds the call that waited (none waits now) and waits for
	// the run on its way.
	testkit.WaitFor(t, 10*time.Second, waiting(0), "the take to hold the waiting call")
	select {
	case bodies := <-took:
		t.Fatalf("the take answered with %d calls while a run leased for it was on its way", len(bodies))
	default:
	}
	call(2)
	bodies := <-took
	if len(bodies) != 2 {
		t.Fatalf("the take handed out %d calls, want the waiting one and the one that was on its way", len(bodies))
	}
	answer(bodies)
	for range 3 {
		if res := <-results; !res.OK {
			t.Errorf("call ended %+v", res.Err)
		}
	}
}
