package trigger_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/trigger"
)

// captureQueue keeps every delivery intake enqueues, as Enqueue got it,
// and answers a delivery carrying Offers or Cancels as if it had matched
// or cancelled one waiting entry (the store's side is storetest's).
type captureQueue struct {
	mu  sync.Mutex
	got []*touba.Delivery
}

func (q *captureQueue) Enqueue(_ context.Context, d *touba.Delivery) (touba.EnqueueResult, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	cp := *d
	q.got = append(q.got, &cp)
	res := touba.EnqueueResult{QueueID: "q-" + d.EventID, Created: true, Digest: d.Digest, Status: touba.StatusPending}
	if len(d.Offers) > 0 {
		res.Matched = []string{"q-waiting-" + d.EventID}
	}
	if len(d.Cancels) > 0 {
		res.Cancelled = []string{"q-cancelled-" + d.EventID}
	}
	return res, nil
}

func (q *captureQueue) last(tb testing.TB) *touba.Delivery {
	tb.Helper()
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.got) == 0 {
		tb.Fatal("nothing enqueued")
	}
	return q.got[len(q.got)-1]
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type durableIntake struct {
	p        *trigger.Program
	q        *captureQueue
	in       *trigger.Intake
	log      *syncBuffer
	notified atomic.Int64
	url      string
}

func newDurableIntake(t *testing.T, p *trigger.Program) *durableIntake {
	t.Helper()
	f := &durableIntake{p: p, q: &captureQueue{}, log: &syncBuffer{}}
	f.in = &trigger.Intake{Queue: f.q, Logger: zerolog.New(f.log).Level(zerolog.InfoLevel),
		Enqueued: func() { f.notified.Add(1) }}
	f.in.SetConfig(&trigger.Config{Program: p})
	f.url = newServer(t, f.in).URL
	return f
}

func (f *durableIntake) post(t *testing.T, name, body string, hdr map[string]string) *touba.Delivery {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.url+"/triggers/"+name, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST %s: %d, want 202", name, resp.StatusCode)
	}
	return f.q.last(t)
}

func mv(kv ...string) []touba.MatchValue {
	var out []touba.MatchValue
	for i := 0; i < len(kv); i += 2 {
		out = append(out, touba.MatchValue{Key: kv[i], Value: kv[i+1]})
	}
	return out
}
