package sqlite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/sqlite"
)

// The child of TestHistoryCrash: it opens the files in the folder named
// by historyChildEnv and runs a pass, which a crash point kills.
const historyChildEnv = "TOUBA_SQLITE_HISTORY_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(historyChildEnv); dir != "" {
		s, err := sqlite.Open(context.Background(), filesIn(dir))
		if err == nil {
			h := s.History()
			h.Batch = 2
			_, err = h.Prune(context.Background(), time.Now().Add(time.Hour))
		}
		fmt.Fprintf(os.Stderr, "child pass ended without its crash point: %v\n", err)
		os.Exit(3)
	}
	os.Exit(m.Run())
}

func filesIn(dir string) sqlite.Config {
	return sqlite.Config{Queue: filepath.Join(dir, "q.sqlite"), State: filepath.Join(dir, "s.sqlite"), Journal: filepath.Join(dir, "j.sqlite")}
}

// doneEntries makes n done entries, each with a checkpoint, a run and an
// applied effect, and returns their ids.
func doneEntries(t *testing.T, s *sqlite.Store, n int) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for i := range n {
		body := fmt.Sprintf(`{"n":%d}`, i)
		r, err := s.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: fmt.Sprint("ev", i), Digest: "d" + body,
			Body: []byte(body), RemoteAddr: "192.0.2.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.QueueID)
	}
	leased, err := s.Queue.Lease(ctx, n)
	if err != nil || len(leased) != n {
		t.Fatalf("lease: %d, %v", len(leased), err)
	}
	for _, d := range leased {
		id := d.QueueID
		if err := s.State.SaveStep(id, d.LeaseToken, "s1", "run-"+id, json.RawMessage(`{}`)); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		s.State.RecordRun(&touba.Run{RunID: "run-" + id, QueueID: id, TriggerRef: "trigger:t", Attempt: 1, Status: "done", StartedAt: now, EndedAt: &now})
		if _, err := s.Journal.Prepare(ctx, touba.EffectPrepare{Scope: id, EffectID: id + ":s1", ToolRef: "tool:t", Operation: touba.OperationInvoke,
			Fingerprint: "sha256:00", RetryMode: touba.RetryIdempotencyKey, CallID: "c" + id, LeaseToken: d.LeaseToken}); err != nil {
			t.Fatal(err)
		}
		if err := s.Journal.Dispatch(ctx, id, id+":s1", "c"+id); err != nil {
			t.Fatal(err)
		}
		if err := s.Journal.Finish(ctx, touba.EffectOutcome{Scope: id, EffectID: id + ":s1", CallID: "c" + id, State: touba.EffectApplied,
			ReceiptRef: "r", Result: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
		if err := s.Queue.Finish(ctx, id, d.LeaseToken, touba.StatusDone, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.State.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestHistoryCrash kills a pass (SIGKILL) between the commits of its
// three files and checks what the next start finds: every entry still in
// the queue has its checkpoint and its effect (it could be resumed, and
// must not repeat its write); every entry gone is either wholly gone or
// listed as forgotten; and the next pass ends the work.
func TestHistoryCrash(t *testing.T) {
	for _, point := range []string{sqlite.CrashAfterForgetEntries, sqlite.CrashAfterForgetRuns, sqlite.CrashAfterForgetEffects} {
		t.Run(point, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			s, err := sqlite.Open(ctx, filesIn(dir))
			if err != nil {
				t.Fatal(err)
			}
			ids := doneEntries(t, s, 5)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), historyChildEnv+"="+dir, crashpoint.Env+"="+point)
			cmd.Stderr = os.Stderr
			err = cmd.Run()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("child ended with %v (%v), want killed at %s", cmd.ProcessState, err, point)
			}

			s, err = sqlite.Open(ctx, sqlite.Config{Queue: filesIn(dir).Queue, State: filesIn(dir).State, Journal: filesIn(dir).Journal,
				TakeOverStaleLock: true, RequeueRunning: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			forgotten, err := s.Queue.Forgotten(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			listed := map[string]bool{}
			for _, id := range forgotten {
				listed[id] = true
			}
			for _, id := range ids {
				d, err := s.Queue.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				eff, err := s.Journal.Get(ctx, id, id+":s1")
				if err != nil {
					t.Fatal(err)
				}
				steps, err := s.State.Steps(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case d != nil && (eff == nil || len(steps) != 1):
					t.Fatalf("entry %s is there without its effect (%v) or checkpoint (%v)", id, eff, steps)
				case d == nil && !listed[id] && (eff != nil || len(steps) != 0):
					t.Fatalf("entry %s is gone, not listed as forgotten, and its effect (%v) or checkpoint (%v) stayed", id, eff, steps)
				case d != nil && listed[id]:
					t.Fatalf("entry %s is there and listed as forgotten", id)
				}
			}
			if len(listed) == 0 {
				t.Fatalf("no entry listed as forgotten after a crash at %s", point)
			}
			h := s.History()
			if _, err := h.Prune(ctx, time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if left, err := s.Queue.Forgotten(ctx, 100); err != nil || len(left) != 0 {
				t.Fatalf("forgotten after the next pass: %v (%v), want none", left, err)
			}
			for _, id := range ids {
				d, _ := s.Queue.Get(ctx, id)
				eff, _ := s.Journal.Get(ctx, id, id+":s1")
				ev, _ := s.Journal.Events(ctx, id, id+":s1")
				steps, _ := s.State.Steps(ctx, id)
				runs, _ := s.State.Runs(ctx, id)
				if d != nil || eff != nil || len(ev) != 0 || len(steps) != 0 || len(runs) != 0 {
					t.Fatalf("after the next pass %s left: entry %v, effect %v, %d events, %d checkpoints, %d runs",
						id, d, eff, len(ev), len(steps), len(runs))
				}
			}
		})
	}
}
