package admin_test

import (
	"context"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// Triggers gives each trigger of the running program its dispatch weight,
// and none to a trigger known only from its entries.
func TestTriggersCarryTheWeight(t *testing.T) {
	f := mustFiles(t)
	f.entry(t, "e1", `{}`, touba.StatusPending) // of trigger:t, which the program lacks
	f.svc.ProgramTriggers = func() []admin.ProgramTrigger {
		return []admin.ProgramTrigger{{Ref: "trigger:heavy", Weight: 40}, {Ref: "trigger:plain", Weight: 10}}
	}
	got, err := f.svc.Triggers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"trigger:heavy": 40, "trigger:plain": 10, "trigger:t": 0}
	if len(got) != len(want) {
		t.Fatalf("Triggers=%+v, want %d rows", got, len(want))
	}
	for _, tr := range got {
		if w, ok := want[tr.TriggerRef]; !ok || tr.Weight != w {
			t.Errorf("%s: weight=%d, want %d", tr.TriggerRef, tr.Weight, w)
		}
	}
}
