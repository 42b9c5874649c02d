package postgres

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// SPEC §8.1: a node killed (SIGKILL) at each point of a pass leaves
// nothing half-forgotten, no run, checkpoint, effect or event whose entry
// is gone, and every kept entry whole; the next pass, on another node,
// ends the work: no partition of the range is left, attached, detaching
// or detached.
func TestKilledMidPass(t *testing.T) {
	for _, point := range []string{CrashAfterFreeze, CrashMidDetach, CrashAfterDetach} {
		t.Run(point, func(t *testing.T) {
			ctx := context.Background()
			url := pgtest.New(t)
			clk := &testClock{t: time.Now()}
			window := 80 * time.Second
			st := openNode(t, url, "n1", clk, window)
			done := ranEntries(t, st, "done", 20, touba.StatusDone)
			parked := ranEntries(t, st, "parked", 2, touba.StatusParked)
			clk.Add(3 * window)
			st.Close()

			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), historyChildEnv+"="+url, crashpoint.Env+"="+point,
				fmt.Sprint("TOUBA_PG_HISTORY_NOW=", clk.Now().UnixMilli()), "TOUBA_PG_HISTORY_WINDOW="+window.String())
			cmd.Stderr = os.Stderr
			err := cmd.Run()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("child ended with %v (%v), want killed at %s", cmd.ProcessState, err, point)
			}
			conn := superConn(t, url)
			if h := halfForgotten(t, conn); len(h) > 0 {
				t.Fatalf("after a kill at %s, rows whose entry is gone: %v", point, h)
			}
			st = openNode(t, url, "n2", clk, window)
			wantKept := func() {
				t.Helper()
				for _, id := range parked {
					if d, err := st.Queue.Get(ctx, id); err != nil || d == nil || d.Status != touba.StatusParked {
						t.Fatalf("parked entry %s: %+v (%v)", id, d, err)
					}
					if e, err := st.Journal.Get(ctx, id, id+":s1"); err != nil || e == nil {
						t.Fatalf("effect of parked %s: %v (%v)", id, e, err)
					}
				}
			}
			wantKept()
			for i := 0; ; i++ {
				rep, err := st.History().Prune(ctx, clk.Now().Add(-window))
				if err != nil {
					t.Fatal(err)
				}
				if !rep.More {
					break
				}
				if i == 10 {
					t.Fatalf("still more after 10 passes: %+v", rep)
				}
			}
			wantKept()
			for _, id := range done {
				if d, err := st.Queue.Get(ctx, id); err != nil || d != nil {
					t.Fatalf("entry %s after the next pass: %+v (%v), want forgotten", id, d, err)
				}
			}
			if h := halfForgotten(t, conn); len(h) > 0 {
				t.Fatalf("after the next pass, rows whose entry is gone: %v", h)
			}
			if n := count(t, conn, `SELECT count(*) FROM pg_class c WHERE obj_description(c.oid, 'pg_class') = $1`, forgettingMark); n != 0 {
				t.Fatalf("%d partitions marked as being forgotten are left", n)
			}
			if n := count(t, conn, `SELECT count(*) FROM pg_inherits WHERE inhdetachpending`); n != 0 {
				t.Fatalf("%d partitions left detaching", n)
			}
		})
	}
}
