package manifest_test

import (
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
)

func TestCheckUsage(t *testing.T) {
	m := MustParse(t, specExample)
	both := []string{"tool:examples.orders/ReadOrder", "tool:examples.orders/CreateOrder"}
	if err := m.CheckUsage(both); err != nil {
		t.Fatalf("CheckUsage(both)=%v, want nil", err)
	}
	// A step may use a binding several times; a used ref the manifest does
	// not bind is the program loader's refusal, not this one.
	if err := m.CheckUsage(append(both, both[0], "tool:other/X")); err != nil {
		t.Fatalf("CheckUsage(repeats)=%v, want nil", err)
	}

	err := m.CheckUsage([]string{"tool:examples.orders/ReadOrder"})
	want := m.Path + `: $.bindings["tool:examples.orders/CreateOrder"]: binding is not used by any program step`
	if err == nil || err.Error() != want {
		t.Fatalf("CheckUsage=%v, want %s", err, want)
	}
	if got, want := touba.ErrorCode(err), touba.ECONFIG; got != want {
		t.Fatalf("ErrorCode=%q, want %q", got, want)
	}

	err = m.CheckUsage(nil)
	if err == nil || strings.Count(err.Error(), "binding is not used") != 2 {
		t.Fatalf("CheckUsage(nil)=%v, want both bindings refused", err)
	}
}
