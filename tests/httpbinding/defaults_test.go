package httpbinding_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
)

// failing is an API that is down: it holds each request a moment, answers
// 503, and records how many requests it had in flight at once.
type failing struct {
	*httptest.Server
	mu                    sync.Mutex
	inFlight, max, served int
}

func newFailing(t *testing.T, hold time.Duration) *failing {
	t.Helper()
	f := &failing{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.inFlight++
		f.max = max(f.max, f.inFlight)
		f.mu.Unlock()
		time.Sleep(hold) // simulated work: the API takes hold to answer
		f.mu.Lock()
		f.inFlight--
		f.served++
		f.mu.Unlock()
		http.Error(w, "orders API unavailable", http.StatusServiceUnavailable)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *failing) counts() (inFlight, max, served int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inFlight, f.max, f.served
}

// defaultOrders is more orders than the default max_concurrency, posted at
// once to a daemon whose 256 workers could call for all of them.
const defaultOrders = 40

// An http binding that sets neither max_concurrency nor circuit, in the real
// binary, against an API that answers 503 to everything (issue 44): the API
// never sees more than the default 16 requests at once, the default circuit
// opens, and once it is open the API sees no request until the probe
// (open_ms, 30 s, later).
func TestDefaultsProtectAFailingRemoteThroughTheBinary(t *testing.T) {
	api := newFailing(t, 100*time.Millisecond)
	dir := t.TempDir()
	d := testkit.Start(t, []string{"HTTPB_ORDERS_TOKEN=" + ordersToken, "NO_PROXY=", "no_proxy="}, "serve",
		writeFile(t, dir, "program.air.json", program),
		"--manifest", writeFile(t, dir, "touba.manifest.json", manifest(api.URL+"/orders/{/order_id}/payment")),
		"--queue", filepath.Join(dir, "q.sqlite"), "--state", filepath.Join(dir, "s.sqlite"),
		"--effect-journal", filepath.Join(dir, "j.sqlite"), "--admin-socket", filepath.Join(dir, "admin.sock"),
		"--listen", "127.0.0.1:0", "--metrics-listen", "")
	var wg sync.WaitGroup
	for i := range defaultOrders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("evt-%d", i)
			if status, _ := testkit.Post(t, d.URL()+"/triggers/shop/Paid", id, fmt.Sprintf(`{"order": "A-%d", "amount": 100}`, i)); status != http.StatusAccepted {
				t.Errorf("post %s: %d", id, status)
			}
		}()
	}
	wg.Wait()
	d.WaitLog(`"event":"circuit.open"`, 60*time.Second)
	// Calls in flight when it opened send no further try: the API's
	// requests end, and then none comes while the circuit is open.
	testkit.WaitFor(t, 10*time.Second, func() bool { n, _, _ := api.counts(); return n == 0 }, "the requests in flight to end")
	_, most, before := api.counts()
	// Nothing to wait for: the span in which requests must not come.
	time.Sleep(3 * time.Second)
	_, _, after := api.counts()
	t.Logf("at most %d requests in flight; %d requests before the circuit's quiet, %d after", most, before, after)
	if most > 16 {
		t.Errorf("the API had %d requests in flight at once, want at most the default max_concurrency 16", most)
	}
	if most < 2 {
		t.Errorf("the API had at most %d request in flight: the test posted too slowly to tell", most)
	}
	if after != before {
		t.Errorf("the API received %d requests while the circuit was open", after-before)
	}
}
