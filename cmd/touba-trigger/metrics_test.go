package main_test

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

// scrape returns every sample of /metrics as "name{labels}" -> value.
func scrape(tb testing.TB, addr string) map[string]float64 {
	tb.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			tb.Fatalf("sample %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func wantSample(tb testing.TB, got map[string]float64, name string, want float64) {
	tb.Helper()
	if v, ok := got[name]; !ok || v != want {
		tb.Fatalf("%s=%v (present %v), want %v", name, v, ok, want)
	}
}

// TestMetricsAfterKnownTraffic sends a known mix to an intake-only daemon,
// then lets a second one on the same files run the entries, and checks
// each scrape against what was sent.
func TestMetricsAfterKnownTraffic(t *testing.T) {
	e := newOpEnv(t, stubProgram, stubManifest)
	d := e.start(t, func(c *server.Config) { c.Workers, c.MetricsListen = 0, "127.0.0.1:0" })
	addr := d.MetricsAddr().String()
	url := d.URL() + "/triggers/ops/Bills"
	for i := 0; i < 5; i++ {
		if status, _ := testkit.Post(t, url, fmt.Sprintf("bill-%d", i), fmt.Sprintf(`{"n":%d}`, i)); status != 202 {
			t.Fatalf("post %d: %d", i, status)
		}
	}
	for i := 0; i < 2; i++ { // still pending: duplicates
		if status, _ := testkit.Post(t, url, "bill-0", `{"n":0}`); status != 202 {
			t.Fatalf("duplicate: %d", status)
		}
	}
	if status, _ := testkit.Post(t, url, "bill-1", `{"n":99}`); status != 409 {
		t.Fatalf("conflict: %d", status)
	}
	if status, _ := testkit.Post(t, d.URL()+"/triggers/ops/Nope", "x", `{}`); status != 404 {
		t.Fatalf("unknown trigger: %d", status)
	}
	got := scrape(t, addr)
	const ref = `trigger_ref="trigger:ops/Bills"`
	wantSample(t, got, `touba_deliveries_total{code="enqueued",status="202",`+ref+`}`, 5)
	wantSample(t, got, `touba_deliveries_total{code="duplicate",status="202",`+ref+`}`, 2)
	wantSample(t, got, `touba_deliveries_total{code="TriggerEventPayloadConflict",status="409",`+ref+`}`, 1)
	// A path naming no trigger is counted under "unknown": senders must not add series.
	wantSample(t, got, `touba_deliveries_total{code="TriggerNotFound",status="404",trigger_ref="unknown"}`, 1)
	wantSample(t, got, `touba_queue_entries{status="pending"}`, 5)
	wantSample(t, got, `touba_queue_entries{status="done"}`, 0)
	wantSample(t, got, `touba_queue_enqueued_total`, 5)
	if age := got[`touba_queue_oldest_pending_age_seconds`]; age <= 0 || age > 600 {
		t.Fatalf("oldest pending age=%v, want above 0", age)
	}
	if c, r := got[`touba_queue_commits_total`], got[`touba_queue_commit_requests_total`]; c < 1 || r < 5 || r < c {
		t.Fatalf("queue commit counters: commits %v requests %v", c, r)
	}
	if err := d.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}

	// A dispatcher now runs the five entries: five calls, five effects.
	d = e.start(t, func(c *server.Config) { c.MetricsListen = "127.0.0.1:0" })
	addr = d.MetricsAddr().String()
	testkit.WaitFor(t, opWait, func() bool { return scrape(t, addr)[`touba_queue_entries{status="done"}`] == 5 }, "the entries to run")
	got = scrape(t, addr)
	wantSample(t, got, `touba_queue_entries{status="pending"}`, 0)
	wantSample(t, got, `touba_queue_oldest_pending_age_seconds`, 0)
	wantSample(t, got, `touba_handler_calls_total{outcome="applied",tool_ref="tool:ops/Bill"}`, 5)
	wantSample(t, got, `touba_dispatch_latency_seconds_count{tool_ref="tool:ops/Bill"}`, 5)
	wantSample(t, got, `touba_effects{state="applied"}`, 5)
	wantSample(t, got, `touba_effects{state="unknown"}`, 0)
	// Each effect of the in-process stub is two writer operations
	// (prepared and dispatched in one, then applied: docs/performance.md),
	// and start-up recovery one more; the batch histogram holds them all.
	tr := got[`touba_journal_transitions_total`]
	if tr != 11 || got[`touba_journal_commit_batch_size_sum`] != tr {
		t.Fatalf("journal transitions=%v, batch sizes sum=%v, want 11 (5 effects x 2 + recovery)", tr, got[`touba_journal_commit_batch_size_sum`])
	}
	if n := got[`touba_journal_commit_batch_size_count`]; n < 1 || n > tr || n != got[`touba_journal_commits_total`] {
		t.Fatalf("journal commits: histogram %v, counter %v", n, got[`touba_journal_commits_total`])
	}
}
