package queue

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/internal/uuidv7"
)

// purgeChildEnv, set to a queue file, makes the test binary a daemon that
// runs one retention pass on it (its clock and cutoff, Unix ms, in
// TOUBA_SQLITE_PURGE_NOW and TOUBA_SQLITE_PURGE_CUTOFF) and exits 3,
// unless its crash point kills it first.
const purgeChildEnv = "TOUBA_SQLITE_PURGE_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(purgeChildEnv); path != "" {
		os.Exit(purgeChild(path))
	}
	os.Exit(m.Run())
}

func purgeChild(path string) int {
	ms := func(name string) time.Time {
		n, _ := strconv.ParseInt(os.Getenv(name), 10, 64)
		return time.UnixMilli(n)
	}
	now := ms("TOUBA_SQLITE_PURGE_NOW")
	q, err := Open(context.Background(), path, Options{Now: func() time.Time { return now }})
	if err == nil {
		_, err = q.purgePass(context.Background(), ms("TOUBA_SQLITE_PURGE_CUTOFF"))
	}
	fmt.Fprintf(os.Stderr, "child pass ended without its crash point: %v\n", err)
	return 3
}

// A daemon killed (SIGKILL) in a retention pass, its chunks committed but
// the pass not recorded, while a body it had to keep (a wait may read it)
// was not yet in purge_left: after a restart, a bounded pass once the wait
// is over purges it, since the next pass reads from the last recorded one
// (had the killed pass recorded its cutoff first, the body would by then be
// below the range, and outlive --retention until the daily pass).
func TestRetentionPassKilled(t *testing.T) {
	ctx := context.Background()
	const retention = 2 * time.Hour
	c := &purgeClock{t: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}
	ids := &uuidv7.Generator{Now: c.Now}
	path := filepath.Join(t.TempDir(), "q.sqlite")
	open := func() *Queue {
		q, err := Open(ctx, path, Options{Now: c.Now, NewID: ids.New})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Close() })
		return q
	}
	q := open()
	tick := func(d time.Duration) {
		for end := c.Now().Add(d); c.Now().Before(end); {
			c.Add(markEvery)
			if err := q.sampleMark(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	tick(6 * time.Hour)
	early := ran(t, q, "trigger:r", "early", touba.StatusDone)
	tick(3 * time.Hour)
	first := c.Now().Add(-retention)
	if _, err := q.purgePass(ctx, first); err != nil {
		t.Fatal(err)
	}
	if !purgedBody(t, q, early) {
		t.Fatal("the first pass did not purge the early entry")
	}
	kept := ran(t, q, "trigger:r", "kept", touba.StatusDone)
	done := ran(t, q, "trigger:r", "done", touba.StatusDone)
	waiter := ran(t, q, "trigger:w", "waiter", touba.StatusPending)
	execOp(t, q, `INSERT INTO offers (key, value, queue_id, created_at) VALUES ('trigger:w#k', 'v', ?, ?)`, kept, touba.FormatTime(c.Now()))
	tick(8 * time.Hour)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}

	var log bytes.Buffer
	deadline, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(deadline, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), purgeChildEnv+"="+path, crashpoint.Env+"="+CrashPurgeBeforeRecord,
		fmt.Sprint("TOUBA_SQLITE_PURGE_NOW=", c.Now().UnixMilli()),
		fmt.Sprint("TOUBA_SQLITE_PURGE_CUTOFF=", c.Now().Add(-retention).UnixMilli()))
	cmd.Stderr = &log
	err := cmd.Run()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v (%v), want killed at %s\n%s", cmd.ProcessState, err, CrashPurgeBeforeRecord, log.String())
	}

	q = open()
	if !purgedBody(t, q, done) || purgedBody(t, q, kept) {
		t.Fatal("the killed pass's chunks: want the done entry purged and the one a wait may read kept")
	}
	var recorded string
	var left int
	if err := q.db.Read.QueryRow(`SELECT cutoff, (SELECT COUNT(*) FROM purge_left) FROM purge_state`).Scan(&recorded, &left); err != nil ||
		recorded != touba.FormatTime(first) || left != 0 {
		t.Fatalf("after the kill: recorded cutoff %q, %d left (%v): want the first pass's %s, none left", recorded, left, err, touba.FormatTime(first))
	}
	ds, err := q.Lease(ctx, 10)
	if err != nil || len(ds) != 1 || ds[0].QueueID != waiter {
		t.Fatalf("lease of the waiter: %v, %v", ds, err)
	}
	if err := q.Finish(ctx, waiter, ds[0].LeaseToken, touba.StatusDone, "", ""); err != nil {
		t.Fatal(err)
	}
	tick(6 * time.Hour)
	cutoff := c.Now().Add(-retention)
	if r, err := q.purgeRangeFor(ctx, cutoff, c.Now()); err != nil || r.full {
		t.Fatalf("the pass after the restart reads %+v (%v): want a bounded pass", r, err)
	}
	if _, err := q.purgePass(ctx, cutoff); err != nil {
		t.Fatal(err)
	}
	if !purgedBody(t, q, kept) {
		t.Fatal("the body the killed pass kept outlived the bounded pass once no wait could read it")
	}
}
