package admin_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/sqlite/journal"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
)

// files is a Service on real files in a temporary folder, counting its
// dispatcher wake-ups.
type files struct {
	dir   string
	q     *queue.Queue
	st    *state.State
	j     *journal.Journal
	svc   *admin.Service
	wakes atomic.Int64
}

func mustFiles(tb testing.TB) *files {
	tb.Helper()
	ctx := context.Background()
	f := &files{dir: tb.TempDir()}
	var err error
	if f.q, err = queue.Open(ctx, filepath.Join(f.dir, "q.sqlite"), queue.Options{}); err != nil {
		tb.Fatal(err)
	}
	if f.st, err = state.Open(ctx, filepath.Join(f.dir, "s.sqlite"), state.Options{}); err != nil {
		tb.Fatal(err)
	}
	if f.j, err = journal.Open(ctx, filepath.Join(f.dir, "j.sqlite"), journal.Options{}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		f.q.Close()
		f.st.Close()
		f.j.Close()
	})
	f.svc = &admin.Service{Queue: f.q, State: f.st, Journal: f.j, Wake: func() { f.wakes.Add(1) }, Log: zerolog.Nop()}
	return f
}

// entry enqueues one delivery of trigger:t and brings it to status.
func (f *files) entry(tb testing.TB, eventID, body, status string) string {
	tb.Helper()
	ctx := context.Background()
	r, err := f.q.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: eventID,
		Digest: dedupe.Digest([]byte(body)), Body: []byte(body)})
	if err != nil || !r.Created {
		tb.Fatalf("enqueue %s: %v %+v", eventID, err, r)
	}
	if status == touba.StatusPending {
		return r.QueueID
	}
	got, err := f.q.Lease(ctx, 1)
	if err != nil || len(got) != 1 || got[0].QueueID != r.QueueID {
		tb.Fatalf("lease %s: %v %+v", eventID, err, got)
	}
	switch status {
	case touba.StatusRunning:
	case touba.StatusParked:
		err = f.q.Finish(ctx, r.QueueID, got[0].LeaseToken, status, touba.EEffectReconciliationRequired, "outcome unknown")
	case touba.StatusFailed:
		err = f.q.Finish(ctx, r.QueueID, got[0].LeaseToken, status, touba.EHandlerFailed, "boom")
	default:
		err = f.q.Finish(ctx, r.QueueID, got[0].LeaseToken, status, "", "")
	}
	if err != nil {
		tb.Fatal(err)
	}
	return r.QueueID
}

// effect journals an effect of step in scope ending in outcome.
func (f *files) effect(tb testing.TB, scope, step, retryMode, outcome string) string {
	tb.Helper()
	ctx := context.Background()
	id := scope + ":" + step
	call := "call-" + id
	if _, err := f.j.Prepare(ctx, touba.EffectPrepare{Scope: scope, EffectID: id, ToolRef: "tool:t", Operation: touba.OperationInvoke,
		Fingerprint: "sha256:" + step, RetryMode: retryMode, CallID: call}); err != nil {
		tb.Fatal(err)
	}
	if err := f.j.Dispatch(ctx, scope, id, call); err != nil {
		tb.Fatal(err)
	}
	o := touba.EffectOutcome{Scope: scope, EffectID: id, CallID: call, State: outcome}
	if outcome == touba.EffectApplied {
		o.ReceiptRef, o.Result = "r-"+step, []byte(`{"ok":true}`)
	}
	if err := f.j.Finish(ctx, o); err != nil {
		tb.Fatal(err)
	}
	return id
}

// logRow writes one delivery log row and waits until it is stored.
func (f *files) logRow(tb testing.TB, d *touba.LoggedDelivery) string {
	tb.Helper()
	f.st.Log(d)
	if err := f.st.Flush(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return d.DeliveryID
}

func (f *files) status(tb testing.TB, queueID string) string {
	tb.Helper()
	d, err := f.q.Get(context.Background(), queueID)
	if err != nil || d == nil {
		tb.Fatalf("get %s: %v", queueID, err)
	}
	return d.Status
}

// operatorEvents returns the audit rows of an entry.
func (f *files) operatorEvents(tb testing.TB, queueID string) []touba.OperatorEvent {
	tb.Helper()
	ev, err := f.st.OperatorEvents(context.Background(), queueID, 0)
	if err != nil {
		tb.Fatal(err)
	}
	return ev
}
