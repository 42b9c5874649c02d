package admin_test

import (
	"context"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// TestReplayFilteredDelivery: a delivery the trigger's filter kept out (a
// 202 row with code filtered and its body) can be enqueued on purpose, and
// gets its concurrency key as intake would give it.
func TestReplayFilteredDelivery(t *testing.T) {
	f := mustFiles(t)
	ctx := context.Background()
	keyed := 0
	f.svc.Keyed = func(d *touba.Delivery) { keyed++; d.ConcKey, d.ConcMax = `"c1"`, 1 }
	id := f.logRow(t, &touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: "evt-f", StatusCode: 202,
		ErrorCode: touba.IntakeFiltered, Body: []byte(`{"n":1}`), BodyStored: true})
	r, err := f.svc.ReplayDelivery(ctx, admin.DeliveryReplayRequest{DeliveryID: id})
	if err != nil || r.Status != touba.IntakeEnqueued {
		t.Fatalf("replay of a filtered delivery: %+v %v, want enqueued", r, err)
	}
	if e, err := f.svc.Entries(ctx, admin.EntryFilter{}); err != nil || len(e) != 1 || e[0].ConcurrencyKey != `"c1"` || keyed != 1 {
		t.Fatalf("entries=%+v %v keyed=%d, want one entry keyed c1", e, err, keyed)
	}
	// A filtered row without its body (pruned) cannot be.
	gone := f.logRow(t, &touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: "evt-g", StatusCode: 202, ErrorCode: touba.IntakeFiltered})
	if _, err := f.svc.ReplayDelivery(ctx, admin.DeliveryReplayRequest{DeliveryID: gone}); err == nil {
		t.Fatal("replayed a filtered delivery whose body is gone")
	}
}
