package handler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/touba/touba-trigger/sdk/handler"
)

// TestWorkerKeepsItsConnections: a worker's answers, up to MaxInFlight at
// once, reuse the connections earlier answers left open. With the default
// transport's 2 idle connections a host, most answers opened a TCP
// connection of their own, which cost about as much as a quick call.
// Against a stand-in for the daemon's wire that hands out bursts of calls.
func TestWorkerKeepsItsConnections(t *testing.T) {
	const inFlight, total = 4, 200
	var mu sync.Mutex
	left, answered, conns := total, 0, 0
	all := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Max int `json:"max"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path == "/workers/v1/answer" {
			if answered++; answered == total {
				close(all)
			}
			_, _ = w.Write([]byte(`{"status": "recorded"}`))
			return
		}
		var calls []any
		for ; len(calls) < body.Max && left > 0; left-- {
			calls = append(calls, newRequest(fmt.Sprintf("c%d", left), map[string]any{"n": left}, false))
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"calls": calls})
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	srv.Start()
	defer srv.Close()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	w := &handler.Worker{URL: srv.URL, Token: "t", MaxInFlight: inFlight, TakeWait: 50 * time.Millisecond,
		Logf: func(string, ...any) {},
		Tools: []handler.Tool{{Ref: testRef, Run: func(_ context.Context, c *handler.Call) (*handler.Result, error) {
			return handler.Output(c.Input), nil
		}}}}
	go func() { done <- w.Run(ctx) }()
	select {
	case <-all:
	case <-time.After(time.Minute):
		mu.Lock()
		n := answered
		mu.Unlock()
		t.Fatalf("%d of %d calls answered within a minute", n, total)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// One connection for the take and one for each call in flight, and a
	// few the transport may dial while another is being put back.
	if conns > 2*inFlight+2 {
		t.Errorf("%d calls took %d connections; want at most %d", total, conns, 2*inFlight+2)
	}
}
