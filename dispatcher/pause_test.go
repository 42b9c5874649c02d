package dispatcher_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// TestPauseBetweenStepsGivesTheWorkerBack (SPEC §2.2 "Holds take
// nothing"): a trigger paused while its run's first step is in flight
// lets that call finish (its outcome journaled), then the run gives its
// worker back before the second step: pending, its attempt given back,
// nothing more called. Resumed, the run goes on from its second step.
func TestPauseBetweenStepsGivesTheWorkerBack(t *testing.T) {
	var calls atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		if calls.Add(1) == 1 {
			select {
			case <-release:
			case <-req.Context().Done():
				return
			}
		}
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"stored": true}`)
	}))
	defer srv.Close()
	w := newWorld(t, program(t, 3, step{"one", toolW, map[string]any{"n": 1}}, step{"two", toolW, map[string]any{"n": 2}}),
		webhookManifest(t, srv.URL, touba.RetryIdempotencyKey), map[string]string{"HOOK_KEY": "pause-test-hook-secret"}, true)
	qid := w.enqueue(trigName, `{}`, nil)
	testkit.WaitFor(t, waitFor, func() bool { return calls.Load() == 1 }, "the first step's call in flight")

	ctx := context.Background()
	if _, err := w.q.PauseTrigger(ctx, touba.TriggerPause{TriggerRef: "trigger:" + trigName, At: time.Now(), Operator: "test"}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, waitFor, func() bool { return w.d.PausedNow("trigger:" + trigName) }, "the dispatcher to see the pause")
	close(release)
	t.Cleanup(func() {
		if t.Failed() {
			e := w.entry(qid)
			t.Logf("entry at the end: %s %s %d, %d calls", e.Status, e.ErrorCode, e.Attempts, calls.Load())
		}
	})
	testkit.WaitFor(t, waitFor, func() bool {
		e := w.entry(qid)
		return e.Status == touba.StatusPending && e.ErrorCode == touba.ETriggerPaused
	}, "the run handed back before its second step")
	if e := w.entry(qid); e.Attempts != 0 {
		t.Fatalf("paused between steps: attempts %d, want the lease's attempt given back (0)", e.Attempts)
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("the remote saw %d calls, want only the first step's", got)
	}

	if _, err := w.q.ResumeTrigger(ctx, "trigger:"+trigName); err != nil {
		t.Fatal(err)
	}
	w.d.Notify()
	e := w.wait(qid, touba.StatusDone)
	if got := calls.Load(); got != 2 || e.Attempts != 1 {
		t.Fatalf("after the resume: %d calls, attempts %d; want 2 calls (the second step alone) at attempt 1", got, e.Attempts)
	}
}
