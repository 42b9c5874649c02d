package journal_test

import (
	"context"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/sqlite/journal"
)

// TestCrashDurability kills a real child process (SIGKILL through
// Crashpoint) at each point of prepare and dispatch, then opens the file as
// the next start would: what the child was told is on disk is there, and
// recovery never assumes the outcome of a dispatched effect.
func TestCrashDurability(t *testing.T) {
	tests := []struct {
		point       string
		wantState   string // "" for no effect at all
		wantRecover string // state after Recover
	}{
		// Killed inside the first commit: the reservation was never
		// acknowledged, and nothing is stored.
		{journal.CrashBeforeCommit, "", ""},
		// Killed after the commit, before the caller heard of it.
		{journal.CrashAfterCommit, touba.EffectPrepared, touba.EffectPrepared},
		{"test.after_prepare", touba.EffectPrepared, touba.EffectPrepared},
		{"test.after_dispatch", touba.EffectDispatched, touba.EffectUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.point, func(t *testing.T) {
			ctx := context.Background()
			path := journalPath(t)
			cmd, _ := startChild(t, "dispatch", path, crashpoint.Env+"="+tt.point)
			waitKilled(t, cmd)

			j := mustOpen(t, path, journal.Options{})
			e, err := j.Get(ctx, "q1", "q1:charge")
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantState == "" {
				if e != nil {
					t.Fatalf("found %+v, want nothing stored", e)
				}
				return
			}
			if e == nil || e.State != tt.wantState {
				t.Fatalf("after the crash: %+v, want state %s", e, tt.wantState)
			}
			recovered, err := j.Recover(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := mustGet(t, j, "q1", "q1:charge").State, tt.wantRecover; got != want {
				t.Fatalf("after recovery: state=%s, want %s", got, want)
			}
			if tt.wantRecover == touba.EffectUnknown {
				if len(recovered) != 1 || recovered[0].EffectID != "q1:charge" {
					t.Fatalf("recovered %+v, want q1:charge", recovered)
				}
				ev := mustEvents(t, j, "q1", "q1:charge")
				if last := ev[len(ev)-1]; last.State != touba.EffectUnknown || !strings.HasPrefix(last.Detail, journal.RecoveryDetail) {
					t.Fatalf("last event %+v, want the recovery", last)
				}
				// retry_mode idempotency_key: the next attempt may go.
				if e, err := j.Prepare(ctx, prep("q1", "q1:charge", "call-2")); err != nil || e.Attempts != 2 {
					t.Fatalf("next attempt: %+v, %v", e, err)
				}
				return
			}
			// A prepared effect was never sent: a new attempt is allowed.
			if e, err := j.Prepare(ctx, prep("q1", "q1:charge", "call-2")); err != nil || e.Attempts != 2 {
				t.Fatalf("prepare after the crash: %+v, %v", e, err)
			}
		})
	}
}
