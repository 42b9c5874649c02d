package metrics_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/metrics"
	"github.com/touba/touba-trigger/sqlite/journal"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
)

// Scrape fetches url and returns every sample as "name{labels}" -> value,
// labels as the exposition format writes them (sorted by name).
func Scrape(tb testing.TB, url string) map[string]float64 {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		tb.Fatalf("scrape: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
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

func want(tb testing.TB, got map[string]float64, name string, value float64) {
	tb.Helper()
	v, ok := got[name]
	if !ok {
		tb.Fatalf("no sample %s", name)
	}
	if v != value {
		tb.Fatalf("%s=%v, want %v", name, v, value)
	}
}

func TestScrapeAfterKnownWork(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m := metrics.New()
	q, err := queue.Open(ctx, filepath.Join(dir, "q.sqlite"), queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	j, err := journal.Open(ctx, filepath.Join(dir, "j.sqlite"), journal.Options{OnCommit: m.ObserveJournalCommit})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	st, err := state.Open(ctx, filepath.Join(dir, "s.sqlite"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m.WatchFiles(q, j, st)

	// Three entries: one done, one failed, one pending.
	var ids []string
	for i := 0; i < 3; i++ {
		body := []byte(strconv.Itoa(i))
		r, err := q.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:m", EventID: "e" + strconv.Itoa(i),
			Digest: dedupe.Digest(body), Body: body, ReceivedAt: time.Now().Add(-time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.QueueID)
		m.ObserveDelivery("trigger:m", touba.IntakeEnqueued, 202)
	}
	m.ObserveDelivery("trigger:m", touba.ETriggerSignatureInvalid, 401)
	leased, err := q.Lease(ctx, 2)
	if err != nil || len(leased) != 2 {
		t.Fatalf("lease: %v %d", err, len(leased))
	}
	q.Finish(ctx, ids[0], leased[0].LeaseToken, touba.StatusDone, "", "")
	q.Finish(ctx, ids[1], leased[1].LeaseToken, touba.StatusFailed, touba.EHandlerFailed, "x")
	// One applied effect: prepared, dispatched, applied.
	p := touba.EffectPrepare{Scope: ids[0], EffectID: ids[0] + ":s", ToolRef: "tool:m", Operation: touba.OperationInvoke,
		Fingerprint: "sha256:x", RetryMode: touba.RetryIdempotencyKey, CallID: "c"}
	if _, err := j.Prepare(ctx, p); err != nil {
		t.Fatal(err)
	}
	j.Dispatch(ctx, p.Scope, p.EffectID, "c")
	if err := j.Finish(ctx, touba.EffectOutcome{Scope: p.Scope, EffectID: p.EffectID, CallID: "c", State: touba.EffectApplied,
		ReceiptRef: "r", Result: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	m.ObserveCall("tool:m", touba.EffectApplied, 20*time.Millisecond)
	m.ObserveCall("tool:m", touba.EffectUnknown, 2*time.Second)

	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	got := Scrape(t, srv.URL)
	want(t, got, `touba_deliveries_total{code="enqueued",status="202",trigger_ref="trigger:m"}`, 3)
	want(t, got, `touba_deliveries_total{code="TriggerSignatureInvalid",status="401",trigger_ref="trigger:m"}`, 1)
	want(t, got, `touba_queue_entries{status="pending"}`, 1)
	want(t, got, `touba_queue_entries{status="done"}`, 1)
	want(t, got, `touba_queue_entries{status="failed"}`, 1)
	want(t, got, `touba_queue_entries{status="parked"}`, 0)
	want(t, got, `touba_queue_entries{status="waiting"}`, 0)
	want(t, got, `touba_queue_entries{status="cancelled"}`, 0)
	want(t, got, `touba_queue_enqueued_total`, 3)
	want(t, got, `touba_effects{state="applied"}`, 1)
	want(t, got, `touba_effects{state="unknown"}`, 0)
	want(t, got, `touba_handler_calls_total{outcome="applied",tool_ref="tool:m"}`, 1)
	want(t, got, `touba_handler_calls_total{outcome="unknown",tool_ref="tool:m"}`, 1)
	want(t, got, `touba_dispatch_latency_seconds_count{tool_ref="tool:m"}`, 2)
	want(t, got, `touba_dispatch_latency_seconds_bucket{tool_ref="tool:m",le="0.025"}`, 1)
	want(t, got, `touba_journal_transitions_total`, 3)
	if n := got[`touba_journal_commit_batch_size_count`]; n < 1 || n > 3 {
		t.Fatalf("journal commits observed=%v, want 1 to 3", n)
	}
	if age := got[`touba_queue_oldest_pending_age_seconds`]; age < 59 || age > 600 {
		t.Fatalf("oldest pending age=%v, want about a minute", age)
	}
	if got[`touba_queue_commits_total`] < 1 || got[`touba_queue_commit_requests_total`] < 5 {
		t.Fatalf("queue commit counters: %v %v", got[`touba_queue_commits_total`], got[`touba_queue_commit_requests_total`])
	}
}
