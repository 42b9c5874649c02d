package gather_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// remote is the system the runs write to: it records each call (a run's
// step) once per Idempotency-Key, as a remote that deduplicates would,
// and counts every call, repeats included.
type remote struct {
	srv *httptest.Server

	mu    sync.Mutex
	seen  map[string]bool
	calls []call // first arrivals, in order
	total int    // every call, repeats included
}

// call is one run's step as the remote saw it: the gathered deliveries.
type call struct {
	Key   string
	At    time.Time
	Input struct {
		Key    string  `json:"key"`
		Last   int     `json:"last"`
		Events []event `json:"events"`
	} `json:"input"`
}

// event is one gathered delivery as the run context shows it.
type event struct {
	EventID string `json:"event_id"`
	QueueID string `json:"queue_id"`
	Body    struct {
		Key string `json:"key"`
		Seq int    `json:"seq"`
	} `json:"body"`
}

// seqs are the events' seq, in the order the run saw them.
func (c call) seqs() []int {
	out := make([]int, len(c.Input.Events))
	for i, e := range c.Input.Events {
		out[i] = e.Body.Seq
	}
	return out
}

func newRemote(t *testing.T) *remote {
	r := &remote{seen: map[string]bool{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *remote) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	c := call{Key: req.Header.Get("Idempotency-Key"), At: time.Now()}
	if err := json.Unmarshal(body, &c); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.total++
	if !r.seen[c.Key] {
		r.seen[c.Key] = true
		r.calls = append(r.calls, c)
	}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"stored": true}`))
}

// got returns the distinct calls so far and the count of every call.
func (r *remote) got() ([]call, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...), r.total
}

// forKey is the calls whose gathering's key is key, in arrival order.
func (r *remote) forKey(key string) []call {
	calls, _ := r.got()
	var out []call
	for _, c := range calls {
		if c.Input.Key == key {
			out = append(out, c)
		}
	}
	return out
}
