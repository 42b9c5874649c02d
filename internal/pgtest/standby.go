package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Standby is a streaming replica of a cluster, synchronous: the primary's
// commits return only once the standby has them (synchronous_commit on,
// synchronous_standby_names '*').
type Standby struct{ *Cluster }

// NewStandby makes a synchronous standby of c (pg_basebackup), starts it on
// a port of its own, and makes c wait for it at every commit. Both stop
// when t ends.
func (c *Cluster) NewStandby(t testing.TB) *Standby {
	t.Helper()
	return c.newStandby(t, true)
}

// NewAsyncStandby is NewStandby for an asynchronous standby: c's commits
// do not wait for it, so what it has not received when c crashes is lost
// by a failover to it (the case SPEC §8's synchronous standby rules out).
func (c *Cluster) NewAsyncStandby(t testing.TB) *Standby {
	t.Helper()
	return c.newStandby(t, false)
}

func (c *Cluster) newStandby(t testing.TB, sync bool) *Standby {
	t.Helper()
	dir, err := os.MkdirTemp("", "touba-pg-standby-")
	if err != nil {
		t.Fatal(err)
	}
	s := &Cluster{Dir: dir, cred: c.cred, Durable: c.Durable}
	t.Cleanup(func() { s.Stop(); os.RemoveAll(dir) })
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	if s.Port, err = freePort(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := s.command(filepath.Join(BinDir, "pg_basebackup"), "-h", "127.0.0.1", "-p", strconv.Itoa(c.Port), "-U", "touba",
		"-D", filepath.Join(dir, "data"), "-R", "-X", "stream", "-c", "fast").CombinedOutput()
	if err != nil {
		t.Fatalf("pg_basebackup: %v: %s", err, out)
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("start the standby: %v", err)
	}
	// Synchronous from now on (set after the copy: the standby, promoted,
	// must not wait for a standby of its own).
	want := `state = 'streaming'`
	if sync {
		for _, q := range []string{`ALTER SYSTEM SET synchronous_standby_names = '*'`, `SELECT pg_reload_conf()`} {
			if err := c.exec(ctx, q); err != nil {
				t.Fatalf("primary: %s: %v", q, err)
			}
		}
		want = `sync_state = 'sync'`
	}
	// Wait until the primary sees it streaming (synchronous when asked).
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := c.Exec(ctx, "postgres", `DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_stat_replication WHERE `+want+`) THEN
			RAISE EXCEPTION 'no standby streaming yet'; END IF; END $$`)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("standby not streaming within 60s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return &Standby{Cluster: s}
}

// Promote makes the standby a primary and waits until it accepts writes.
func (s *Standby) Promote(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.exec(ctx, `SELECT pg_promote(true, 60)`); err != nil {
		t.Fatalf("promote: %v", err)
	}
}

// MultiHostURL is the URL of database name on the primary c, then the
// standby s, for the primary only (target_session_attrs=read-write).
func MultiHostURL(c *Cluster, s *Standby, name string) string {
	return fmt.Sprintf("postgres://touba@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write",
		c.Port, s.Port, name)
}

// HoldWALSenders stops c's WAL senders (SIGSTOP): from then on no WAL
// leaves c, while an asynchronous primary goes on committing. (Stopping
// the standby's receiver instead is not enough: what was already sent
// waits in its socket and is read once it runs again.) A crash of c ends
// them: its postmaster kills what does not exit; t's end resumes any left.
func (c *Cluster) HoldWALSenders(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_replication`)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil || len(pids) == 0 {
		t.Fatalf("the primary's WAL senders: %v %v", pids, err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("stop the WAL sender %d: %v", pid, err)
		}
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	}
}
