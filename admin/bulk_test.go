package admin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/dedupe"
)

// failMany puts n entries of trigger:t in failed with code, in one lease.
func (f *files) failMany(tb testing.TB, n int, prefix, code string) []string {
	tb.Helper()
	ctx := context.Background()
	var ids []string
	for i := range n {
		body := fmt.Sprintf(`{"n": %d}`, i)
		r, err := f.q.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: fmt.Sprintf("%s-%d", prefix, i),
			Digest: dedupe.Digest([]byte(body)), Body: []byte(body)})
		if err != nil || !r.Created {
			tb.Fatalf("enqueue: %v %+v", err, r)
		}
		ids = append(ids, r.QueueID)
	}
	got, err := f.q.Lease(ctx, n)
	if err != nil || len(got) != n {
		tb.Fatalf("lease: %d %v", len(got), err)
	}
	for _, d := range got {
		if err := f.q.Finish(ctx, d.QueueID, d.LeaseToken, touba.StatusFailed, code, "boom"); err != nil {
			tb.Fatal(err)
		}
	}
	return ids
}

// TestBulkReplayInBatches: --status failed with --code counts its
// selection (a dry run changes nothing), then replays it in batches of
// admin.ReplayBatch, each entry audited with the operator's reason; the
// entries of another code stay failed.
func TestBulkReplayInBatches(t *testing.T) {
	f := mustFiles(t)
	ctx := admin.WithOperator(context.Background(), "test")
	n := 2*admin.ReplayBatch + 7
	ids := f.failMany(t, n, "a", touba.EHandlerFailed)
	others := f.failMany(t, 3, "b", touba.EHandlerTimeout)
	dry, err := f.svc.ReplayEntries(ctx, admin.ReplayRequest{Status: touba.StatusFailed, Code: touba.EHandlerFailed, DryRun: true})
	if err != nil || dry.Matched != n || dry.Replayed != 0 || !dry.DryRun || !strings.Contains(dry.Note, "would be replayed") {
		t.Fatalf("dry run: %v %+v", err, dry)
	}
	if got := f.status(t, ids[0]); got != touba.StatusFailed {
		t.Fatalf("after a dry run %s is %s", ids[0], got)
	}
	rep, err := f.svc.ReplayEntries(ctx, admin.ReplayRequest{Status: touba.StatusFailed, Code: touba.EHandlerFailed,
		Since: time.Now().Add(-time.Hour), Reason: "INC-9: upstream fixed"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Matched != n || rep.Replayed != n || rep.Batches != 3 || len(rep.Items) != n {
		t.Fatalf("bulk replay: matched %d replayed %d batches %d items %d; want %d, %d, 3, %d",
			rep.Matched, rep.Replayed, rep.Batches, len(rep.Items), n, n, n)
	}
	for _, id := range []string{ids[0], ids[admin.ReplayBatch], ids[n-1]} {
		if got := f.status(t, id); got != touba.StatusPending {
			t.Errorf("%s is %s, want pending", id, got)
		}
		ev := f.operatorEvents(t, id)
		if len(ev) != 1 || ev[0].Reason != "INC-9: upstream fixed" || ev[0].Operator != "test" || ev[0].Outcome != "done" {
			t.Errorf("audit of %s: %+v", id, ev)
		}
	}
	for _, id := range others {
		if got := f.status(t, id); got != touba.StatusFailed {
			t.Errorf("%s (another code) is %s, want failed", id, got)
		}
	}
	if f.q.Pending() != int64(n) {
		t.Errorf("pending=%d, want %d", f.q.Pending(), n)
	}
	if rep, err := f.svc.ReplayEntries(ctx, admin.ReplayRequest{Status: touba.StatusFailed, Since: time.Now().Add(time.Hour)}); err != nil ||
		rep.Matched != 0 || !strings.HasPrefix(rep.Note, "no failed entries received since ") {
		t.Fatalf("replay of a window in the future: %v %+v", err, rep)
	}
	// A dry run by ids (what --repin shows first) checks and changes nothing.
	if rep, err := f.svc.ReplayEntries(ctx, admin.ReplayRequest{IDs: others[:1], DryRun: true}); err != nil || !rep.DryRun ||
		rep.Replayed != 0 || len(rep.Items) != 1 || rep.Items[0].Reason != "" || f.status(t, others[0]) != touba.StatusFailed {
		t.Fatalf("dry run by ids: %v %+v", err, rep)
	}
	for _, bad := range []admin.ReplayRequest{{Status: "done"}, {IDs: ids[:1], Code: "x"}} {
		if _, err := f.svc.ReplayEntries(ctx, bad); touba.ErrorCode(err) != touba.EBadRequest {
			t.Errorf("replay %+v: %v, want %s", bad, err, touba.EBadRequest)
		}
	}
}

// TestSearchThroughTheService: one search box takes a queue id or an event
// id; a body filter's value is JSON when it parses, else a string; a body
// search without a window looks back admin.BodySearchWindow.
func TestSearchThroughTheService(t *testing.T) {
	f := mustFiles(t)
	ctx := context.Background()
	a := f.entry(t, "ev-1", `{"customer": {"id": "cus_1"}, "n": 1, "ok": true}`, touba.StatusFailed)
	b := f.entry(t, "ev-2", `{"customer": {"id": "cus_1"}, "n": "1"}`, touba.StatusPending)
	if !admin.LooksLikeQueueID(a) || admin.LooksLikeQueueID("ev-1") || admin.LooksLikeQueueID(strings.ToUpper(a)+"x") {
		t.Fatalf("LooksLikeQueueID")
	}
	for _, c := range []struct {
		r    admin.SearchRequest
		want []string
	}{
		{admin.SearchRequest{QueueID: a}, []string{a}},
		{admin.SearchRequest{EventID: "ev-2"}, []string{b}},
		{admin.SearchRequest{Body: "/customer/id=cus_1"}, []string{b, a}},
		{admin.SearchRequest{Body: `/customer/id="cus_1"`}, []string{b, a}},
		{admin.SearchRequest{Body: "/n=1"}, []string{a}},
		{admin.SearchRequest{Body: `/n="1"`}, []string{b}},
		{admin.SearchRequest{Body: "/ok=true"}, []string{a}},
		{admin.SearchRequest{Body: "/customer/id=cus_1", Status: touba.StatusFailed}, []string{a}},
		{admin.SearchRequest{Body: "/customer/id=cus_1", Since: time.Now().Add(time.Hour)}, nil},
	} {
		rep, err := f.svc.Search(ctx, c.r)
		if err != nil {
			t.Fatalf("search %+v: %v", c.r, err)
		}
		var got []string
		for _, e := range rep.Entries {
			got = append(got, e.QueueID)
		}
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("search %+v: %v, want %v", c.r, got, c.want)
		}
		if c.r.Body != "" && c.r.Since.IsZero() && time.Since(rep.Since) < admin.BodySearchWindow-time.Minute {
			t.Errorf("search %+v: window since %v, want the last %v", c.r, rep.Since, admin.BodySearchWindow)
		}
	}
	for _, bad := range []admin.SearchRequest{{}, {Body: "no-equals"}, {Body: "customer=1"}} {
		if _, err := f.svc.Search(ctx, bad); touba.ErrorCode(err) != touba.EBadRequest {
			t.Errorf("search %+v: %v, want %s", bad, err, touba.EBadRequest)
		}
	}
}
