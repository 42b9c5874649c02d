package admin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/report"
)

// gathered enqueues a delivery of trigger:t batched by two on key "k".
func (f *files) gathered(tb testing.TB, eventID string) touba.EnqueueResult {
	tb.Helper()
	body := `{"id":"` + eventID + `"}`
	r, err := f.q.Enqueue(context.Background(), &touba.Delivery{TriggerRef: "trigger:t", EventID: eventID,
		Digest: dedupe.Digest([]byte(body)), Body: []byte(body), Gather: &touba.GatherSpec{Kind: touba.GatherBatch,
			Key: touba.GatherKeyOf(touba.GatherBatch, "/event/body/k"), Value: `"k"`, Window: time.Minute, MaxSize: 2}})
	if err != nil || !r.Created {
		tb.Fatalf("enqueue %s: %v %+v", eventID, err, r)
	}
	return r
}

// `queue show` of a carrier lists what it gathered, that of a merged entry
// names its carrier; replaying a merged entry replays its carrier, and
// resuming one says to resume the carrier.
func TestGatheringShownAndReplayed(t *testing.T) {
	f := mustFiles(t)
	ctx := context.Background()
	carrier := f.gathered(t, "g1").QueueID
	if d, err := f.svc.Entry(ctx, carrier); err != nil || d.Gathering == nil || !d.Gathering.Live || d.Gathering.Size != 1 ||
		len(d.Next) != 1 || !strings.Contains(d.Next[0], "gathering batch deliveries") {
		t.Fatalf("an open gathering's carrier: %+v, %v", d, err)
	}
	m := f.gathered(t, "g2").QueueID
	d, err := f.svc.Entry(ctx, carrier)
	if err != nil || d.Gathering == nil || d.Gathering.State != touba.GatheringStarted || len(d.Gathering.Merged) != 1 ||
		d.Gathering.Merged[0].QueueID != m || d.Gathering.Merged[0].EventID != "g2" {
		t.Fatalf("the carrier of a full batch: %+v, %v", d.Gathering, err)
	}
	md, err := f.svc.Entry(ctx, m)
	if err != nil || md.Status != touba.StatusMerged || md.MergedInto != carrier || md.Gathering != nil ||
		!strings.Contains(strings.Join(md.Next, " "), "queue show "+carrier) {
		t.Fatalf("the merged entry: %+v, %v", md, err)
	}
	got, err := f.q.Lease(ctx, 10)
	if err != nil || len(got) != 1 || got[0].QueueID != carrier {
		t.Fatalf("lease: %+v, %v; want the carrier", got, err)
	}
	if err := f.q.Finish(ctx, carrier, got[0].LeaseToken, touba.StatusFailed, touba.EHandlerFailed, "boom"); err != nil {
		t.Fatal(err)
	}
	rep, err := f.svc.ReplayEntries(ctx, admin.ReplayRequest{IDs: []string{m}})
	if err != nil || rep.Replayed != 1 || rep.Items[0].QueueID != carrier || rep.Items[0].Merged != m || rep.Items[0].Status != touba.StatusPending {
		t.Fatalf("replay of the merged %s: %+v, %v; want its carrier %s replayed", m, rep, err, carrier)
	}
	if _, err := f.svc.Resume(ctx, admin.ResumeRequest{QueueID: m, From: "s"}); touba.ErrorCode(err) != touba.EEntryNotResumable ||
		!strings.Contains(touba.ErrorMessage(err), "queue resume "+carrier) {
		t.Fatalf("resume of a merged entry: %v, want EntryNotResumable naming its carrier", err)
	}
}

// `queue ls` of a debounce or batch carrier says when its gathering starts,
// not that it waits "on its event (no timeout)": it waits for no event.
func TestCarrierListedWithItsGathering(t *testing.T) {
	f := mustFiles(t)
	ctx := context.Background()
	body := `{"id":"d1"}`
	r, err := f.q.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: "d1", Digest: dedupe.Digest([]byte(body)),
		Body: []byte(body), Gather: &touba.GatherSpec{Kind: touba.GatherDebounce,
			Key: touba.GatherKeyOf(touba.GatherDebounce, "/event/body/k"), Value: `"k"`, Window: time.Minute, MaxWait: time.Hour}})
	if err != nil || !r.Created {
		t.Fatalf("enqueue: %v %+v", err, r)
	}
	batch := f.gathered(t, "b1").QueueID
	list, err := f.svc.Entries(ctx, admin.EntryFilter{Status: touba.StatusWaiting})
	if err != nil || len(list) != 2 {
		t.Fatalf("waiting entries: %+v, %v", list, err)
	}
	for _, e := range list {
		want := touba.GatherDebounce
		if e.QueueID == batch {
			want = touba.GatherBatch
		}
		if e.Gathers == nil || e.Gathers.Kind != want || e.Gathers.WakeAt.IsZero() {
			t.Errorf("carrier %s: gathers %+v, want its %s gathering's start", e.QueueID, e.Gathers, want)
		}
	}
	var out strings.Builder
	if err := report.Entries(&out, list); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"(debounce gathering)", "(batch gathering, or when full)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("queue ls lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "on its event") {
		t.Errorf("queue ls shows a carrier waiting on its event:\n%s", out.String())
	}
	if d, err := f.svc.Entry(ctx, r.QueueID); err != nil || d.Gathers == nil || d.Gathers.Kind != touba.GatherDebounce {
		t.Fatalf("queue show of the carrier: %+v, %v", d, err)
	}
}
