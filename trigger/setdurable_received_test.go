package trigger_test

import (
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/trigger"
)

// TestSetDurable_ReceivedAtOfAReplay: an operator's replay of a stored
// delivery reaches SetDurable with no received_at yet (the queue gives it
// one at Enqueue). A cancel_on on /event/received_at must key the entry by
// the received_at it is stored with, not by the zero time, or no delivery
// could ever cancel it.
func TestSetDurable_ReceivedAtOfAReplay(t *testing.T) {
	p := MustParse(t, doc(
		`{"ref":"trigger:a","source":{"kind":"webhook"},"steps":[{"id":"s","sleep":{"ms":60000}}],`+
			`"cancel_on":[{"trigger":"trigger:stop","match":{"$ref":"/event/received_at"},"on":"/body/at"}]}`,
		`{"ref":"trigger:stop","source":{"kind":"webhook"},"steps":[]}`))
	d := &touba.Delivery{TriggerRef: "trigger:a", Body: []byte(`{}`)}
	lookup(t, p, "trigger:a").SetDurable(d)
	if d.ReceivedAt.IsZero() {
		t.Fatalf("received_at left zero: the queue will store another one than the cancel key holds (%v)", d.CancelKeys)
	}
	want, _ := trigger.CanonicalValue(touba.FormatTime(d.ReceivedAt))
	if len(d.CancelKeys) != 1 || d.CancelKeys[0].Value != want {
		t.Fatalf("CancelKeys=%v, want the value %s", d.CancelKeys, want)
	}
}
