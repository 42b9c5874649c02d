package workers_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/sdk/handler"
)

// metricsAddr finds the metrics listener's address in the daemon's log.
var metricsAddr = regexp.MustCompile(`"addr":"([^"]+)"[^}]*"message":"metrics listening"`)

// recorder is an in-process tool that records who ran which call.
type recorder struct {
	mu      sync.Mutex
	events  []string          // event ids, in the order run
	callBy  map[string]string // call id -> worker name
	effects map[string]int    // effect id -> calls
	dup     []string          // call ids run by two workers
}

func newRecorder() *recorder {
	return &recorder{callBy: map[string]string{}, effects: map[string]int{}}
}

func (r *recorder) tool(name string) handler.Tool {
	return handler.Tool{Ref: postTool, Run: func(ctx context.Context, c *handler.Call) (*handler.Result, error) {
		r.mu.Lock()
		r.events = append(r.events, c.Context.EventID)
		if _, ok := r.callBy[c.Context.CallID]; ok {
			r.dup = append(r.dup, c.Context.CallID)
		}
		r.callBy[c.Context.CallID] = name
		e := c.Effect()
		r.effects[e.EffectID]++
		r.mu.Unlock()
		return handler.Output(map[string]string{"posted": e.EffectID}).WithReceipt(c.Receipt(handler.Applied, "r:"+e.EffectID)), nil
	}}
}

// connect runs an in-process worker until the test ends.
func connect(t *testing.T, w *world, name string, maxInFlight int, tools ...handler.Tool) context.CancelFunc {
	return connectTo(t, w.d.URL(), name, maxInFlight, tools...)
}

// connectTo runs an in-process worker connected to the daemon at url
// until the test ends.
func connectTo(t *testing.T, url, name string, maxInFlight int, tools ...handler.Tool) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		wk := &handler.Worker{URL: url, Token: token, Tools: tools, MaxInFlight: maxInFlight, TakeWait: 5 * time.Second,
			Logf: func(format string, args ...any) { t.Logf(name+": "+format, args...) }}
		done <- wk.Run(ctx)
	}()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker %s: %v", name, err)
		}
	}
	var once sync.Once
	t.Cleanup(func() { once.Do(stop) })
	return func() { once.Do(stop) }
}

// TestWorkerTakesInAcceptanceOrder: calls posted while no worker is
// connected wait without being leased (no attempt spent: a hold, SPEC
// §2.2) and drain in acceptance order once one connects (SPEC §4.3); each
// is journaled dispatched before the worker gets it, then applied.
func TestWorkerTakesInAcceptanceOrder(t *testing.T) { eachBackend(t, tWorkerTakesInAcceptanceOrder) }

func tWorkerTakesInAcceptanceOrder(t *testing.T, backend string) {
	w := newWorld(t, backend, touba.RetryIdempotencyKey, 10000)
	w.start("--workers", "8")
	var ids []string
	for i := range 30 {
		ids = append(ids, fmt.Sprintf("evt-%02d", i))
	}
	w.send(orders, ids...)
	// Nothing takes them: they stay pending, never leased.
	testkit.WaitFor(t, 10*time.Second, testkit.Every(100*time.Millisecond, func() bool {
		var ts []struct {
			TriggerRef string `json:"trigger_ref"`
			Pending    int64  `json:"pending"`
			Running    int64  `json:"running"`
		}
		w.cli(&ts, "triggers", "ls")
		for _, tr := range ts {
			if tr.TriggerRef == "trigger:"+orders {
				return tr.Pending == int64(len(ids)) && tr.Running == 0
			}
		}
		return false
	}), "the entries to wait pending")
	// triggers ls names the binding with no worker; the metrics count the
	// calls waiting for one.
	var ts []struct {
		TriggerRef string   `json:"trigger_ref"`
		NoWorker   []string `json:"no_worker"`
	}
	w.cli(&ts, "triggers", "ls")
	if i := slices.IndexFunc(ts, func(x struct {
		TriggerRef string   `json:"trigger_ref"`
		NoWorker   []string `json:"no_worker"`
	}) bool {
		return x.TriggerRef == "trigger:"+orders
	}); i < 0 || !slices.Equal(ts[i].NoWorker, []string{postTool}) {
		t.Errorf("triggers ls: %+v, want %s with no worker", ts, postTool)
	}
	metricsURL := "http://" + metricsAddr.FindStringSubmatch(w.d.Log())[1] + "/metrics"
	var page string
	testkit.WaitForReport(t, 10*time.Second, testkit.Every(200*time.Millisecond, func() bool {
		page = metricsPage(t, metricsURL)
		return strings.Contains(page, `touba_worker_calls_waiting{tool_ref="tool:wk/Post"} 30`) &&
			strings.Contains(page, `touba_worker_connected{tool_ref="tool:wk/Post"} 0`)
	}), "the metrics to show 30 calls waiting and no worker", func() { t.Log(workerMetrics(page)) })
	rec := newRecorder()
	connect(t, w, "w1", 1, rec.tool("w1"))
	w.waitStatus(touba.StatusDone, orders, len(ids), 60*time.Second)
	if page := metricsPage(t, metricsURL); !strings.Contains(page, `touba_worker_calls_handed_out_total{tool_ref="tool:wk/Post"} 30`) ||
		!strings.Contains(page, `touba_worker_connected{tool_ref="tool:wk/Post"} 1`) {
		t.Errorf("metrics after the drain:\n%s", page)
	}
	w.stop()
	rec.mu.Lock()
	got := slices.Clone(rec.events)
	rec.mu.Unlock()
	if !slices.Equal(got, ids) {
		t.Fatalf("order run:\n%v\nwant\n%v", got, ids)
	}
	for _, e := range w.entries() {
		if e.Attempts != 1 {
			t.Errorf("entry %s: %d attempts, want 1 (waiting for a worker spends none)", e.EventID, e.Attempts)
		}
	}
	effects, events := w.effects()
	for _, e := range effects {
		var states []string
		for _, ev := range events[e.EffectID] {
			states = append(states, ev.State)
		}
		if e.State != touba.EffectApplied || !slices.Equal(states, []string{"prepared", "dispatched", "applied"}) {
			t.Errorf("effect %s: %s, events %v", e.EffectID, e.State, states)
		}
	}
}

// TestTwoWorkersNeverHoldOneCall: three workers take many calls at once;
// each call is run by one worker only and each effect applied once.
func TestTwoWorkersNeverHoldOneCall(t *testing.T) { eachBackend(t, tTwoWorkersNeverHoldOneCall) }

func tTwoWorkersNeverHoldOneCall(t *testing.T, backend string) {
	w := newWorld(t, backend, touba.RetryIdempotencyKey, 10000)
	w.start("--workers", "16")
	rec := newRecorder()
	for i := range 3 {
		connect(t, w, fmt.Sprintf("w%d", i), 4, rec.tool(fmt.Sprintf("w%d", i)))
	}
	var ids []string
	for i := range 150 {
		ids = append(ids, fmt.Sprintf("evt-%03d", i))
	}
	w.send(orders, ids...)
	w.waitStatus(touba.StatusDone, orders, len(ids), 90*time.Second)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.dup) > 0 {
		t.Fatalf("calls run by two workers: %v", rec.dup)
	}
	by := map[string]int{}
	for _, name := range rec.callBy {
		by[name]++
	}
	for id, n := range rec.effects {
		if n != 1 {
			t.Errorf("effect %s run %d times", id, n)
		}
	}
	t.Logf("calls by worker: %v", by)
}

// nodeLabel is the label each metric carries on PostgreSQL.
var nodeLabel = regexp.MustCompile(`node_id="[^"]*",?`)

// metricsPage is the metrics page at url without the node_id label, so
// one expectation reads both backends' pages.
func metricsPage(t *testing.T, url string) string {
	_, page := testkit.Get(t, url)
	return strings.ReplaceAll(nodeLabel.ReplaceAllString(page, ""), "{}", "")
}

// workerMetrics are the lines of page about workers and held runs.
func workerMetrics(page string) string {
	var out []string
	for _, l := range strings.Split(page, "\n") {
		if strings.HasPrefix(l, "touba_worker_") || strings.HasPrefix(l, "touba_queue_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
