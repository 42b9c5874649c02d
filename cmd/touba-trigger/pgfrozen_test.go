package main_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/postgres"
)

// frozenProgram has a keyed trigger (concurrency 1 per customer) and an
// unkeyed one, both run by the in-process accounting stub.
const frozenProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:frozen/Keyed", "source": {"kind": "webhook", "event_id": {"header": "x-touba-event-id"}},
   "concurrency": {"key": {"$ref": "/event/body/customer"}, "max": 1},
   "steps": [{"id": "bill", "tool": "tool:frozen/Bill", "input": {"invoice": {"$ref": "/event/body"}, "event_id": {"$ref": "/event/event_id"}}}]},
  {"ref": "trigger:frozen/Plain", "source": {"kind": "webhook", "event_id": {"header": "x-touba-event-id"}},
   "steps": [{"id": "bill", "tool": "tool:frozen/Bill", "input": {"invoice": {"$ref": "/event/body"}, "event_id": {"$ref": "/event/event_id"}}}]}]}`

const frozenManifest = `{"manifest_version": "touba-manifest-v1", "bindings": {"tool:frozen/Bill": {
  "handler": {"kind": "accounting_stub"}, "timeout_ms": 2000,
  "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`

// frozenNodes writes frozenProgram and frozenManifest and returns how to
// start a node on dsn under them: --database-timeout 2s, --lease-ttl 8s.
func frozenNodes(t *testing.T, dsn string) func(name string, env []string, workers int) *testkit.Daemon {
	t.Helper()
	dir := t.TempDir()
	program, manifest := filepath.Join(dir, "program.air.json"), filepath.Join(dir, "touba.manifest.json")
	for p, c := range map[string]string{program: frozenProgram, manifest: frozenManifest} {
		if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return func(name string, env []string, workers int) *testkit.Daemon {
		return testkit.Start(t, env, "serve", program, "--manifest", manifest, "--database", dsn, "--node-id", name,
			"--admin-socket", "", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--workers", fmt.Sprint(workers),
			"--database-timeout", "2s", "--lease-ttl", "8s")
	}
}

// postTimed posts body to trigger under eventID and returns the status
// and how long the answer took (status 0: none within limit).
func postTimed(base, trigger, eventID, body string, limit time.Duration) (int, time.Duration) {
	req, _ := http.NewRequest(http.MethodPost, base+"/triggers/"+trigger, strings.NewReader(body))
	req.Header.Set("x-touba-event-id", eventID)
	start := time.Now()
	resp, err := (&http.Client{Timeout: limit}).Do(req)
	if err != nil {
		return 0, time.Since(start)
	}
	resp.Body.Close()
	return resp.StatusCode, time.Since(start)
}

// stopped tells whether pid is stopped by a signal (state T in /proc).
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'T'
}

// SPEC §8: a node frozen (SIGSTOP) inside intake's transaction, holding a
// key's lock, stalls no other node: the other node answers the sender's
// retry of that delivery within --database-timeout (503, or 202 once the
// server ended the frozen session), keeps accepting unrelated deliveries
// (other keys, unkeyed) with 202 within 5 s and keeps leasing and running
// them; the server ends the frozen session (idle_in_transaction timeout),
// so its lock is released.
func TestFrozenNodeStallsNoOther(t *testing.T) {
	dsn := pgtest.New(t)
	const timeout = 2 * time.Second // frozenNodes' --database-timeout
	node := frozenNodes(t, dsn)
	a := node("frozen-a", []string{"TOUBA_CRASHPOINT=stop:" + postgres.CrashKeyLocked}, 0)
	b := node("live-b", nil, 2)
	defer a.Signal(syscall.SIGCONT) // so that the clean-up's SIGKILL ends it

	aAnswer := make(chan int, 1)
	go func() {
		st, _ := postTimed(a.URL(), "frozen/Keyed", "k-1", `{"customer":"c1"}`, 60*time.Second)
		aAnswer <- st
	}()
	testkit.WaitFor(t, 30*time.Second, func() bool { return stopped(a.Cmd.Process.Pid) }, "node a to freeze holding the key")
	frozeAt := time.Now()
	if slices.ContainsFunc(entryStates(t, dsn), func(e [2]string) bool { return e[0] == "k-1" }) {
		// The freeze came after the commit (a process-directed SIGSTOP
		// let the thread run on): nothing below would test a held lock.
		t.Fatalf("node a stored k-1 before it froze: the freeze is not inside the transaction")
	}

	// The sender's retry on the other node: bounded.
	st, took := postTimed(b.URL(), "frozen/Keyed", "k-1", `{"customer":"c1"}`, 30*time.Second)
	if (st != http.StatusServiceUnavailable && st != http.StatusAccepted) || took > timeout+time.Second {
		t.Errorf("retry of the frozen node's delivery on node b: status %d after %s; want 503 (or 202) within %s",
			st, took.Round(time.Millisecond), timeout+time.Second)
	}
	// Unrelated deliveries: 202 within 5 s each, and run to done.
	for i := range 10 {
		trig, body := "frozen/Plain", `{"n":1}`
		if i%2 == 1 {
			trig, body = "frozen/Keyed", fmt.Sprintf(`{"customer":"other-%d"}`, i)
		}
		st, took := postTimed(b.URL(), trig, fmt.Sprintf("u-%d", i), body, 30*time.Second)
		if st != http.StatusAccepted || took > 5*time.Second {
			t.Errorf("unrelated delivery u-%d on node b while a is frozen: status %d after %s; want 202 within 5s",
				i, st, took.Round(time.Millisecond))
		}
	}
	done := func() int {
		n := 0
		for _, e := range entryStates(t, dsn) {
			if strings.HasPrefix(e[0], "u-") && e[1] == "done" {
				n++
			}
		}
		return n
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return done() == 10 }, "node b to lease and run the 10 unrelated entries")

	// The server ends the frozen session; the key is free again.
	testkit.WaitFor(t, 30*time.Second, func() bool { return idleInTx(t, dsn, "touba-trigger frozen-a") == 0 },
		"the frozen node's idle transaction to be ended by the server")
	t.Logf("frozen session ended %s after the freeze", time.Since(frozeAt).Round(100*time.Millisecond))
	testkit.WaitFor(t, 30*time.Second, func() bool {
		// 200: the first retry above was already stored (the session
		// can end within its 3 s) and its entry has run (SPEC §3.1).
		st, _ := postTimed(b.URL(), "frozen/Keyed", "k-1", `{"customer":"c1"}`, 30*time.Second)
		return st == http.StatusAccepted || st == http.StatusOK
	}, "node b to accept the key's delivery once the lock is released")
	if !stopped(a.Cmd.Process.Pid) {
		t.Fatal("node a is no longer stopped: the test proved nothing")
	}

	// Thawed, node a finds its transaction gone: never a 202 for a
	// delivery it did not store (node b's is the one entry).
	a.Signal(syscall.SIGCONT)
	select {
	case st := <-aAnswer:
		if st == http.StatusAccepted {
			n := 0
			for _, e := range entryStates(t, dsn) {
				if e[0] == "k-1" {
					n++
				}
			}
			if n != 1 {
				t.Errorf("node a answered 202; %d entries of k-1, want 1", n)
			}
		}
		t.Logf("node a's answer after SIGCONT: %d", st)
	case <-time.After(30 * time.Second):
		t.Error("node a did not answer after SIGCONT")
	}
}

// entryStates reads every entry's event id and status.
func entryStates(t *testing.T, dsn string) [][2]string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT event_id, status FROM touba.entries`)
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]string
	for rows.Next() {
		var ev, st string
		if err := rows.Scan(&ev, &st); err != nil {
			t.Fatal(err)
		}
		out = append(out, [2]string{ev, st})
	}
	return out
}

// idleInTx counts the sessions of application name app idle in a
// transaction.
func idleInTx(t *testing.T, dsn, app string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = $1 AND state LIKE 'idle in transaction%'`,
		app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
