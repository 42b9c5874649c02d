package touba_test

import (
	"net/http"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// TestCheckKeys_Boundary: each value a store indexes is accepted at
// exactly MaxKeyBytes and refused one byte over, with KeyTooLong (422).
func TestCheckKeys_Boundary(t *testing.T) {
	if got, want := touba.HTTPStatus(touba.EKeyTooLong), http.StatusUnprocessableEntity; got != want {
		t.Fatalf("HTTPStatus(KeyTooLong)=%d, want %d", got, want)
	}
	at, over := strings.Repeat("x", touba.MaxKeyBytes), strings.Repeat("x", touba.MaxKeyBytes+1)
	set := map[string]func(d *touba.Delivery, v string){
		"event id":        func(d *touba.Delivery, v string) { d.EventID = v },
		"concurrency key": func(d *touba.Delivery, v string) { d.ConcKey = v },
		"debounce key": func(d *touba.Delivery, v string) {
			d.Gather = &touba.GatherSpec{Kind: touba.GatherDebounce, Key: "k", Value: v}
		},
		"cancel_on match value": func(d *touba.Delivery, v string) { d.CancelKeys = []touba.MatchValue{{Key: "c", Value: v}} },
		"offered":               func(d *touba.Delivery, v string) { d.Offers = []touba.MatchValue{{Key: "w", Value: v}} },
		"for a cancel_on":       func(d *touba.Delivery, v string) { d.Cancels = []touba.MatchValue{{Key: "c", Value: v}} },
	}
	for which, fn := range set {
		d := &touba.Delivery{}
		fn(d, at)
		if err := d.CheckKeys(); err != nil {
			t.Fatalf("%s of %d bytes: %v, want accepted", which, touba.MaxKeyBytes, err)
		}
		d = &touba.Delivery{}
		fn(d, over)
		err := d.CheckKeys()
		if got, want := touba.ErrorCode(err), touba.EKeyTooLong; got != want {
			t.Fatalf("%s of %d bytes: code=%q, want %q", which, touba.MaxKeyBytes+1, got, want)
		}
		if msg := touba.ErrorMessage(err); !strings.Contains(msg, which) || !strings.Contains(msg, "1025") || !strings.Contains(msg, "1024") {
			t.Fatalf("%s: message %q does not name the key, its length and the limit", which, msg)
		}
	}
}
