package crash_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/internal/testkit"
)

// world is one test's files: program, manifest, the three SQLite files and
// the remote's file, all in the test's own temp dir.
type world struct {
	t                             *testing.T
	dir, program, manifest        string
	queue, state, journal, remote string
	retryMode                     string
	acked                         map[string]string // event id -> queue id of every 202
	order                         []string          // event ids in the order they were sent
	// db, set, is the PostgreSQL database the nodes share instead of the
	// three files (pg_test.go).
	db string
}

// newWorld writes the program and a manifest binding the remote handler
// with retryMode, run as kind, into a fresh temp dir.
func newWorld(t *testing.T, retryMode, kind string) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{t: t, dir: dir, retryMode: retryMode,
		program: filepath.Join(dir, "program.air.json"), manifest: filepath.Join(dir, "touba.manifest.json"),
		queue: filepath.Join(dir, "q.sqlite"), state: filepath.Join(dir, "s.sqlite"), journal: filepath.Join(dir, "j.sqlite"),
		remote: filepath.Join(dir, "remote.jsonl"), acked: map[string]string{}}
	if err := os.WriteFile(w.program, []byte(program), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.manifest, []byte(manifestFor(remoteBin, w.remote, retryMode, kind)), 0o600); err != nil {
		t.Fatal(err)
	}
	return w
}

// args are the serve arguments on w's files, plus extra.
func (w *world) args(extra ...string) []string {
	if w.db != "" {
		return append([]string{"serve", w.program, "--manifest", w.manifest, "--database", w.db, "--lease-ttl", pgLeaseTTL.String(),
			"--listen", "127.0.0.1:0", "--metrics-listen", "", "--admin-socket", "", "--log-level", "info"}, extra...)
	}
	return append([]string{"serve", w.program, "--manifest", w.manifest, "--queue", w.queue, "--state", w.state,
		"--effect-journal", w.journal, "--listen", "127.0.0.1:0", "--metrics-listen", "",
		"--admin-socket", filepath.Join(w.dir, "admin.sock"), "--log-level", "info"}, extra...)
}

// triggerURL is the URL of the program's trigger at d.
func triggerURL(d *testkit.Daemon) string { return d.URL() + "/triggers/crash/Orders" }

func body(eventID string) string { return fmt.Sprintf(`{"order_id":%q,"amount":42}`, eventID) }

// send posts n deliveries to d, each must be answered 202, and records
// them as acknowledged.
func (w *world) send(d *testkit.Daemon, n int) {
	w.t.Helper()
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("evt-%d", len(w.order)+1)
		status, qid := testkit.Post(w.t, triggerURL(d), id, body(id))
		if status != http.StatusAccepted || qid == "" {
			w.t.Fatalf("post %s: status %d, queue id %q; want 202\n%s", id, status, qid, d.Log())
		}
		w.acked[id], w.order = qid, append(w.order, id)
	}
}

// intake runs the daemon with no dispatcher, acknowledges n deliveries and
// stops it cleanly, so that every one of them is on disk and pending before
// the daemon that will crash starts.
func (w *world) intake(n int) {
	w.t.Helper()
	d := testkit.Start(w.t, nil, w.args("--workers", "0")...)
	w.send(d, n)
	stop(w.t, d)
}

// stop sends SIGTERM and wants the clean exit of SPEC §3.3.
func stop(tb testing.TB, d *testkit.Daemon) {
	tb.Helper()
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(60 * time.Second); code != 0 {
		tb.Fatalf("exit code %d after SIGTERM, want 0\n%s", code, d.Log())
	}
}

// crash runs the daemon with TOUBA_CRASHPOINT=point (and extra serve
// flags) and waits until it has killed itself with SIGKILL. Not through
// testkit.Start: the dispatcher leases the pending entries before the
// "listening" line, so the daemon may die before it would be seen
// listening.
func (w *world) crash(point string, workers int, extra ...string) string {
	w.t.Helper()
	cmd := exec.Command(testkit.Binary(w.t), w.args(append([]string{"--workers", fmt.Sprint(workers)}, extra...)...)...)
	cmd.Env = append(os.Environ(), crashpoint.Env+"="+point)
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-exited
		w.t.Fatalf("crash point %s never fired within 60s\n%s", point, log.String())
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		w.t.Fatalf("crash point %s: daemon ended with %v, want killed by SIGKILL\n%s", point, cmd.ProcessState, log.String())
	}
	return log.String()
}

// restart runs the daemon again on the same files after a crash, taking
// over the lock the dead process left.
func (w *world) restart(workers int) *testkit.Daemon {
	w.t.Helper()
	d := testkit.Start(w.t, nil, w.args("--workers", fmt.Sprint(workers), "--take-over-stale-lock")...)
	if !strings.Contains(d.Log(), "took over a stale journal lock") {
		w.t.Fatalf("restart after a crash did not report taking over the stale lock\n%s", d.Log())
	}
	return d
}

// settle waits until every acknowledged delivery has been taken by the
// dispatcher, then stops the daemon with SIGTERM.
//
// Why this is enough to observe the end from outside: redelivering an
// acknowledged event is answered 202 duplicate while its entry is pending
// and 200 consumed (code TriggerReplayRejected) once a dispatcher took it
// (SPEC §3.1). Once every event is answered 200, no entry is waiting to be
// leased, and
// SIGTERM makes the dispatcher stop leasing and wait for the runs in flight
// (SPEC §3.3), so after a clean exit each entry holds its final state, unless
// a run ended in a retry, which none of these scenarios should, and which
// the checks then report as an entry left pending.
func (w *world) settle(d *testkit.Daemon) {
	w.t.Helper()
	for _, id := range w.order {
		testkit.WaitFor(w.t, 60*time.Second, func() bool {
			status, qid := testkit.Post(w.t, triggerURL(d), id, body(id))
			if qid != w.acked[id] {
				w.t.Fatalf("redelivery of %s names %q, acknowledged as %s", id, qid, w.acked[id])
			}
			if status != http.StatusAccepted && status != http.StatusOK {
				w.t.Fatalf("redelivery of %s: status %d, want 202 or 200", id, status)
			}
			return status == http.StatusOK
		}, "the entry of "+id+" taken by the dispatcher")
	}
	stop(w.t, d)
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
