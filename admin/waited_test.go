package admin

import (
	"testing"

	touba "github.com/touba/touba-trigger"
)

// A run that ended waiting says "waiting" only while its entry still
// waits there; the attempts of an entry past a wait say the count starts
// again at the wait (issue 37).
func TestWaitedRunsAndAttempts(t *testing.T) {
	runs := func() []touba.Run {
		return []touba.Run{{Status: touba.StatusWaiting, ErrorMessage: "waiting at step a"}, {Status: touba.StatusWaiting, ErrorMessage: "waiting at step b"}}
	}
	for _, c := range []struct {
		status string
		want   [2]string
	}{
		{touba.StatusWaiting, [2]string{RunWaited, touba.StatusWaiting}},
		{touba.StatusCancelled, [2]string{RunWaited, RunWaited}},
		{touba.StatusDone, [2]string{RunWaited, RunWaited}},
	} {
		got := waitedRuns(runs(), c.status)
		if got[0].Status != c.want[0] || got[1].Status != c.want[1] {
			t.Errorf("entry %s: runs %s, %s; want %v", c.status, got[0].Status, got[1].Status, c.want)
		}
		if got[0].ErrorMessage != "waited at step a" {
			t.Errorf("entry %s: first run says %q", c.status, got[0].ErrorMessage)
		}
	}
	d := &EntryDetail{Entry: Entry{Attempts: 0}, Runs: runs(), Waits: []WaitDetail{{}}}
	if got, want := d.AttemptsText(), "0 since it last waited (2 runs in all)"; got != want {
		t.Errorf("attempts %q, want %q", got, want)
	}
	d = &EntryDetail{Entry: Entry{Attempts: 2}, Runs: runs()}
	if got := d.AttemptsText(); got != "2" {
		t.Errorf("attempts of an entry that never waited: %q, want 2", got)
	}
}
