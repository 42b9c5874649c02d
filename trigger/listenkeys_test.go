package trigger_test

import (
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/trigger"
)

// ListenToKeys: the keys accepted entries still hold are read by intake
// after a reload: one by meaning on the trigger it names (here one the
// program no longer awaits), a positional one of an earlier release
// through the program's step or cancel_on at that position; a key of a
// trigger the program lacks, or an unreadable one, adds nothing; twice
// adds nothing twice.
func TestListenToKeys(t *testing.T) {
	p := MustParse(t, doc(
		trig("trigger:a", okSource, `[{"id":"paid","wait_for":{"trigger":"trigger:b","match":"x","on":"/body/id"}}]`),
		trig("trigger:b", okSource, `[]`),
		`{"ref":"trigger:c","source":{"kind":"webhook"},"steps":[],"cancel_on":[{"trigger":"trigger:b","match":{"$ref":"/event/body/k"},"on":"/body/k"}]}`))
	old := touba.WaitKeyOf("trigger:a", "paid", "trigger:c", "/body/was")
	keys := []string{old, touba.WaitKey("trigger:a", "paid"), touba.CancelKey("trigger:c", 0),
		touba.WaitKeyOf("trigger:a", "x", "trigger:gone", "/body"), touba.CancelKey("trigger:c", 7), "nonsense"}
	p.ListenToKeys(keys)
	p.ListenToKeys(keys)
	on := func(ls []trigger.Listener) map[string]string {
		m := map[string]string{}
		for _, l := range ls {
			if _, dup := m[l.Key]; dup {
				t.Fatalf("key %s listened twice", l.Key)
			}
			m[l.Key] = l.On
		}
		return m
	}
	if got := on(p.Listeners("trigger:c").Waits); len(got) != 1 || got[old] != "/body/was" {
		t.Fatalf("trigger:c waits %v, want the key by meaning at /body/was", got)
	}
	bw := on(p.Listeners("trigger:b").Waits)
	if len(bw) != 2 || bw[touba.WaitKey("trigger:a", "paid")] != "/body/id" {
		t.Fatalf("trigger:b waits %v, want the program's key and the positional one at /body/id", bw)
	}
	bc := on(p.Listeners("trigger:b").Cancels)
	if len(bc) != 2 || bc[touba.CancelKey("trigger:c", 0)] != "/body/k" {
		t.Fatalf("trigger:b cancels %v, want the program's key and the positional one at /body/k", bc)
	}
}
