package admin_test

import (
	"context"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// TestReplayDeliveryKeyTooLong: a stored delivery whose key, under the
// running program, is over touba.MaxKeyBytes is refused with KeyTooLong
// (issue 43), and nothing is enqueued.
func TestReplayDeliveryKeyTooLong(t *testing.T) {
	f := mustFiles(t)
	ctx := context.Background()
	f.svc.Keyed = func(d *touba.Delivery) {
		d.ConcKey, d.ConcMax = `"`+strings.Repeat("c", touba.MaxKeyBytes)+`"`, 1
	}
	id := f.logRow(t, &touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: "evt-long", StatusCode: 422,
		ErrorCode: touba.EKeyTooLong, Body: []byte(`{"n":1}`), BodyStored: true})
	_, err := f.svc.ReplayDelivery(ctx, admin.DeliveryReplayRequest{DeliveryID: id})
	if got, want := touba.ErrorCode(err), touba.EKeyTooLong; got != want {
		t.Fatalf("replay: %v, want %s", err, want)
	}
	if e, err := f.svc.Entries(ctx, admin.EntryFilter{}); err != nil || len(e) != 0 {
		t.Fatalf("entries=%+v %v, want none", e, err)
	}
}
