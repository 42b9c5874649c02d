package handler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/touba/touba-trigger/sdk/handler"
)

// stubWire is a stand-in for the daemon's worker wire: takes hand out the
// calls of calls in order, up to their max; it records each take's max,
// the answers and the connections opened, and signals changed on each.
type stubWire struct {
	*httptest.Server
	mu       sync.Mutex
	calls    []map[string]any
	handed   int
	maxes    []int
	answered []string
	conns    int
	changed  chan struct{}
}

func newStubWire(t *testing.T, calls []map[string]any) *stubWire {
	s := &stubWire{calls: calls, changed: make(chan struct{}, 1)}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
		}
	}
	s.Start()
	// Closed after the worker stops (cleanups run last first).
	t.Cleanup(s.Close)
	return s
}

func (s *stubWire) serve(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Max    int    `json:"max"`
		CallID string `json:"call_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	s.mu.Lock()
	var out any = map[string]string{"status": "recorded"}
	if r.URL.Path == "/workers/v1/answer" {
		s.answered = append(s.answered, body.CallID)
	} else {
		s.maxes = append(s.maxes, body.Max)
		n := min(body.Max, len(s.calls)-s.handed)
		out = map[string]any{"calls": s.calls[s.handed : s.handed+n]}
		s.handed += n
		if n == 0 {
			s.mu.Unlock()
			time.Sleep(20 * time.Millisecond) // a short long-poll: no call left
			s.mu.Lock()
		}
	}
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
	_ = json.NewEncoder(w).Encode(out)
}

// waitFor waits until cond holds of s (under its lock), for up to a minute.
func (s *stubWire) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		s.mu.Lock()
		ok := cond()
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-s.changed:
		case <-deadline:
			t.Fatalf("waited a minute for %s", what)
		}
	}
}

// runWorker runs w against s until the test ends.
func runWorker(t *testing.T, w *handler.Worker) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

func stubCalls(n int) []map[string]any {
	out := make([]map[string]any, n)
	for i := range out {
		out[i] = newRequest(fmt.Sprintf("c%03d", i), map[string]any{"n": i}, false)
	}
	return out
}

// TestWorkerKeepsItsConnections: a worker's answers, up to MaxInFlight at
// once, reuse the connections earlier answers left open. With the default
// transport's 2 idle connections a host, most answers opened a TCP
// connection of their own, which cost about as much as a quick call.
func TestWorkerKeepsItsConnections(t *testing.T) {
	const inFlight, total = 4, 200
	s := newStubWire(t, stubCalls(total))
	runWorker(t, &handler.Worker{URL: s.URL, Token: "t", MaxInFlight: inFlight, TakeWait: 50 * time.Millisecond,
		Logf: func(string, ...any) {},
		Tools: []handler.Tool{{Ref: testRef, Run: func(_ context.Context, c *handler.Call) (*handler.Result, error) {
			return handler.Output(c.Input), nil
		}}}})
	s.waitFor(t, "every call answered", func() bool { return len(s.answered) == total })
	s.mu.Lock()
	defer s.mu.Unlock()
	// One connection for the take and one for each call in flight, and a
	// few the transport may dial while another is being put back.
	if s.conns > 2*inFlight+2 {
		t.Errorf("%d calls took %d connections; want at most %d", total, s.conns, 2*inFlight+2)
	}
}

// TestWorkerTakesAhead: a worker asks for MaxInFlight calls more than it
// can run, so the next ones are in hand when one ends; it runs at most
// MaxInFlight at once, and starts them in the order taken (one at a time,
// run in that order). With Ahead negative it asks only for its room.
func TestWorkerTakesAhead(t *testing.T) {
	const inFlight, total = 2, 12
	s := newStubWire(t, stubCalls(total))
	release := make(chan struct{})
	var mu sync.Mutex
	var started []string
	running, most := 0, 0
	runWorker(t, &handler.Worker{URL: s.URL, Token: "t", MaxInFlight: inFlight, TakeWait: 50 * time.Millisecond,
		Logf: func(string, ...any) {},
		Tools: []handler.Tool{{Ref: testRef, Run: func(_ context.Context, c *handler.Call) (*handler.Result, error) {
			mu.Lock()
			started = append(started, c.Context.CallID)
			running++
			most = max(most, running)
			mu.Unlock()
			<-release
			mu.Lock()
			running--
			mu.Unlock()
			return handler.Output(c.Input), nil
		}}}})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the worker's stop, should the test fail first
	// Two calls running and blocked, two more taken ahead.
	s.waitFor(t, "the worker to take its room and as many ahead", func() bool { return s.handed == 2*inFlight })
	unblock()
	s.waitFor(t, "every call answered", func() bool { return len(s.answered) == total })
	s.mu.Lock()
	if s.maxes[0] != 2*inFlight {
		t.Errorf("the first take asked for %d calls, want %d", s.maxes[0], 2*inFlight)
	}
	s.mu.Unlock()
	mu.Lock()
	if most > inFlight {
		t.Errorf("%d calls ran at once; MaxInFlight is %d", most, inFlight)
	}
	mu.Unlock()

	// One at a time, with one taken ahead: in the order taken.
	one := newStubWire(t, stubCalls(total))
	var order []string
	runWorker(t, &handler.Worker{URL: one.URL, Token: "t", MaxInFlight: 1, Ahead: 1, TakeWait: 50 * time.Millisecond,
		Logf: func(string, ...any) {},
		Tools: []handler.Tool{{Ref: testRef, Run: func(_ context.Context, c *handler.Call) (*handler.Result, error) {
			mu.Lock()
			order = append(order, c.Context.CallID)
			mu.Unlock()
			return handler.Output(c.Input), nil
		}}}})
	one.waitFor(t, "every call answered", func() bool { return len(one.answered) == total })
	mu.Lock()
	one.mu.Lock()
	if one.maxes[0] != 2 || !slices.IsSorted(order) || len(order) != total {
		t.Errorf("MaxInFlight 1: first take for %d calls (want 2), calls run in the order %v", one.maxes[0], order)
	}
	one.mu.Unlock()
	mu.Unlock()

	for _, w := range []handler.Worker{{MaxInFlight: inFlight, Ahead: -1}, {MaxInFlight: 1}} {
		none := newStubWire(t, stubCalls(1))
		w.URL, w.Token, w.TakeWait, w.Logf = none.URL, "t", 50*time.Millisecond, func(string, ...any) {}
		w.Tools = []handler.Tool{{Ref: testRef, Run: func(_ context.Context, c *handler.Call) (*handler.Result, error) {
			return handler.Output(c.Input), nil
		}}}
		runWorker(t, &w)
		none.waitFor(t, "a take", func() bool { return len(none.maxes) > 0 })
		none.mu.Lock()
		if none.maxes[0] != w.MaxInFlight {
			t.Errorf("MaxInFlight %d, Ahead %d: the first take asked for %d calls, want %d", w.MaxInFlight, w.Ahead, none.maxes[0], w.MaxInFlight)
		}
		none.mu.Unlock()
	}
}

// TestWorkerSkipsCallsPastDeadline: a call taken ahead whose deadline
// passed before it could start is not run and not answered: the daemon
// ended it as a timeout already, and may have handed it to another
// worker.
func TestWorkerSkipsCallsPastDeadline(t *testing.T) {
	calls := stubCalls(2)
	calls[0]["context"].(map[string]any)["deadline_unix_ms"] = time.Now().Add(-time.Second).UnixMilli()
	s := newStubWire(t, calls)
	var mu sync.Mutex
	var ran, logs []string
	runWorker(t, &handler.Worker{URL: s.URL, Token: "t", TakeWait: 50 * time.Millisecond,
		Logf: func(format string, args ...any) {
			mu.Lock()
			logs = append(logs, fmt.Sprintf(format, args...))
			mu.Unlock()
		},
		Tools: []handler.Tool{{Ref: testRef, Run: func(_ context.Context, c *handler.Call) (*handler.Result, error) {
			mu.Lock()
			ran = append(ran, c.Context.CallID)
			mu.Unlock()
			return handler.Output(c.Input), nil
		}}}})
	s.waitFor(t, "the call within its deadline answered", func() bool { return len(s.answered) == 1 })
	// c000's runner may log its skip after c001's answered: wait for it.
	logged := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(strings.Join(logs, "\n"), "c000 was past its deadline")
	}
	for deadline := time.Now().Add(time.Minute); !logged() && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond) // the worker's log signals nothing: look again
	}
	mu.Lock()
	defer mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Equal(ran, []string{"c001"}) || !slices.Equal(s.answered, []string{"c001"}) {
		t.Errorf("ran %v and answered %v; want only c001 (c000 was past its deadline)", ran, s.answered)
	}
	if !strings.Contains(strings.Join(logs, "\n"), "c000 was past its deadline") {
		t.Errorf("nothing logged of the call not run: %q", logs)
	}
}
