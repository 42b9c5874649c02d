package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
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
	for _, q := range []string{`ALTER SYSTEM SET synchronous_standby_names = '*'`, `SELECT pg_reload_conf()`} {
		if err := c.exec(ctx, q); err != nil {
			t.Fatalf("primary: %s: %v", q, err)
		}
	}
	// Wait until the primary sees it streaming, synchronous.
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := c.Exec(ctx, "postgres", `DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync') THEN
			RAISE EXCEPTION 'no synchronous standby yet'; END IF; END $$`)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("standby not synchronous within 60s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return &Standby{s}
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
