package main_test

import (
	"bytes"
	"context"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// serveDB runs `serve` on the database dsn with extra flags, as a child,
// and returns its exit code and stderr once it exits. A serve that starts
// listening instead fails the test at once.
func serveDB(t *testing.T, e *opEnv, dsn string, extra ...string) (int, string) {
	t.Helper()
	args := append([]string{"serve", e.program, "--manifest", e.manifest, "--database", dsn, "--node-id", "refused",
		"--admin-socket", e.socket, "--listen", "127.0.0.1:0", "--metrics-listen", ""}, extra...)
	cmd := exec.Command(testkit.Binary(t), args...)
	var errb syncBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	testkit.WaitFor(t, opWait, func() bool {
		select {
		case <-done:
			return true
		default:
		}
		if strings.Contains(errb.String(), `"message":"listening"`) {
			cmd.Process.Kill()
			<-done
			t.Fatalf("serve started; want it refused\n%s", errb.String())
		}
		return false
	}, "serve to exit")
	return cmd.ProcessState.ExitCode(), errb.String()
}

// syncBuffer is a bytes.Buffer safe for exec's copying goroutine and the
// test reading it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// SPEC §8: a database whose commits may be lost after they returned
// (synchronous_commit = off) refuses start-up, exit 2, ConfigInvalid;
// the same database with it on starts (the control, so the refusal is
// the setting's and nothing else's).
func TestServeRefusesSynchronousCommitOff(t *testing.T) {
	dsn := pgtest.New(t)
	e := newOpEnv(t, opProgram, opManifest)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	ctx := context.Background()
	if err := pgtest.Shared(t).Exec(ctx, "postgres", `ALTER DATABASE `+name+` SET synchronous_commit = off`); err != nil {
		t.Fatal(err)
	}
	code, stderr := serveDB(t, e, dsn)
	if code != 2 || !strings.HasPrefix(stderr, "ConfigInvalid: ") || !strings.Contains(stderr, "synchronous_commit") {
		t.Fatalf("serve on a database with synchronous_commit=off: exit %d, want 2 and ConfigInvalid naming it\n%s", code, stderr)
	}

	if err := pgtest.Shared(t).Exec(ctx, "postgres", `ALTER DATABASE `+name+` RESET synchronous_commit`); err != nil {
		t.Fatal(err)
	}
	d := testkit.Start(t, nil, "serve", e.program, "--manifest", e.manifest, "--database", dsn, "--node-id", "ok",
		"--admin-socket", e.socket, "--listen", "127.0.0.1:0", "--metrics-listen", "")
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(opWait); code != 0 {
		t.Fatalf("serve with synchronous_commit on: exit %d after SIGTERM, want 0", code)
	}
}

// SPEC §8: a lease must never expire under a call still legitimately
// running, so --lease-ttl under a binding's timeout_ms (Notify: 10s)
// plus the margin (5s) refuses start-up, exit 2, naming the binding.
func TestServeRefusesLeaseShorterThanTimeout(t *testing.T) {
	dsn := pgtest.New(t)
	e := newOpEnv(t, opProgram, opManifest)
	code, stderr := serveDB(t, e, dsn, "--lease-ttl", "14s")
	if code != 2 || !strings.HasPrefix(stderr, "ConfigInvalid: ") || !strings.Contains(stderr, "--lease-ttl") ||
		!strings.Contains(stderr, "tool:ops/Notify") {
		t.Fatalf("serve --lease-ttl 14s with a 10s binding: exit %d, want 2 and ConfigInvalid naming tool:ops/Notify\n%s", code, stderr)
	}
	// 15s is the timeout plus the margin: accepted.
	d := testkit.Start(t, nil, "serve", e.program, "--manifest", e.manifest, "--database", dsn, "--node-id", "ok",
		"--lease-ttl", "15s", "--admin-socket", e.socket, "--listen", "127.0.0.1:0", "--metrics-listen", "")
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(opWait); code != 0 {
		t.Fatalf("serve --lease-ttl 15s: exit %d after SIGTERM, want 0", code)
	}
}

// SPEC §8: the CLI works with every node running or none. With no daemon
// on the socket, --database lists the parked entry and resolves its
// effect; a node started afterwards runs it from there.
func TestCLIOnDatabaseWithNoDaemon(t *testing.T) {
	e := newOpEnv(t, opProgram, opManifest)
	e.db = pgtest.New(t)
	d := e.start(t)
	q := parkCharge(t, e, d) // through the admin socket while the node runs
	if err := d.Stop(); err != nil {
		t.Fatalf("daemon stop: %v", err)
	}

	code, out, errs := e.cli(t, "queue", "ls", "--status", "parked")
	if code != 0 || !strings.Contains(out, q) || !strings.Contains(out, "EffectReconciliationRequired") {
		t.Fatalf("queue ls --database with no daemon: exit %d\n%s%s", code, out, errs)
	}
	// SPEC §8: the node that ran the entry, in the table, the JSON and
	// `queue show`.
	if !strings.Contains(out, "NODE") || !strings.Contains(out, "node-cli") {
		t.Fatalf("queue ls --database: no NODE column naming node-cli\n%s", out)
	}
	var listed []struct {
		QueueID string `json:"queue_id"`
		Node    string `json:"node"`
	}
	e.cliJSON(t, &listed, "queue", "ls", "--status", "parked")
	if len(listed) != 1 || listed[0].Node != "node-cli" {
		t.Fatalf("queue ls --json: %+v, want the entry with node node-cli", listed)
	}
	if code, out, errs := e.cli(t, "queue", "show", q); code != 0 || !strings.Contains(out, "node-cli") {
		t.Fatalf("queue show: exit %d, no node named\n%s%s", code, out, errs)
	}
	code, out, errs = e.cli(t, "effects", "resolve", q, q+":charge", "--not-applied")
	if code != 0 || !strings.Contains(out, "not_applied") || !strings.Contains(out, "pending again") {
		t.Fatalf("effects resolve --database with no daemon: exit %d\n%s%s", code, out, errs)
	}
	var shown opEntry
	e.cliJSON(t, &shown, "queue", "show", q)
	if shown.Status != "pending" || len(shown.Operator) != 1 || !strings.Contains(shown.Operator[0].Operator, "no daemon") {
		t.Fatalf("entry after resolve on the database: %+v", shown)
	}

	e.start(t)
	testkit.WaitFor(t, opWait, func() bool { return e.entryStatus(t, q) == "done" }, "the run to finish")
	if n := len(e.handlerCalls(t, "tool:ops/Charge")); n != 2 {
		t.Fatalf("charge calls=%d after resolve --not-applied, want 2", n)
	}
}
