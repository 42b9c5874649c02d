package dispatcher_test

import (
	"fmt"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// A wait_for whose match resolves to more than touba.MaxKeyBytes of JSON
// fails its step with KeyTooLong, once, without retries (issue 43): no
// delivery could offer such a value, and the store's index would refuse
// the wait; at the limit the entry waits.
func TestWaitForMatchTooLong(t *testing.T) {
	for _, c := range []struct {
		letters      int // the order's letters; its JSON adds two quotes
		status, code string
	}{
		{touba.MaxKeyBytes - 2, touba.StatusWaiting, ""},
		{touba.MaxKeyBytes - 1, touba.StatusFailed, touba.EKeyTooLong},
	} {
		t.Run(fmt.Sprint(c.letters+2), func(t *testing.T) {
			cf := tmp(t, "calls")
			w := newWorld(t, orderProgram(t, cf, 0, ""), processManifest(t, []string{toolThen}), nil, true)
			w.mustWaits()
			qid := w.post(orderTrig, fmt.Sprintf(`{"order": %q}`, strings.Repeat("o", c.letters)))
			e := w.wait(qid, c.status)
			if e.ErrorCode != c.code {
				t.Fatalf("entry %s: code %q, want %q", qid, e.ErrorCode, c.code)
			}
			if c.status == touba.StatusFailed {
				if got := w.runStatuses(qid, 1); len(got) != 1 {
					t.Fatalf("runs %v, want one", got)
				}
				if ws := w.waitsOf(qid); len(ws) != 0 {
					t.Fatalf("waits %+v, want none stored", ws)
				}
			}
		})
	}
}
