package main_test

import (
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// SPEC §8: a node started while its database is down waits for it (a log
// line at most every few seconds, no exit), comes up on its own once the
// database answers, names the database (without its password), its node
// id and the schema version in its start-up log, and accepts deliveries.
func TestServeWaitsForDatabaseAtStart(t *testing.T) {
	c := pgtest.Own(t)
	dsn := c.NewDB(t)
	c.Stop()
	e := newOpEnv(t, frozenProgram, frozenManifest)
	secret := strings.Replace(dsn, "postgres://touba@", "postgres://touba:hunter2@", 1)
	cmd := exec.Command(testkit.Binary(t), "serve", e.program, "--manifest", e.manifest, "--database", secret,
		"--node-id", "waiter", "--admin-socket", "", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--database-timeout", "1s")
	var errb syncBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("daemon log:\n%s", errb.String())
		}
	})
	testkit.WaitFor(t, 30*time.Second, func() bool {
		select {
		case <-exited:
			t.Fatalf("serve exited with the database down (exit %d); want it to wait\n%s", cmd.ProcessState.ExitCode(), errb.String())
		default:
		}
		return strings.Contains(errb.String(), "database unavailable at start; waiting for it")
	}, "the waiting log line")
	// Meanwhile the port answers: alive, not ready, deliveries refused for
	// a retry (SPEC §8), never a refused connection or a hang.
	waitAddr := logAddr(errb.String(), "listening while waiting for the database: /healthz 200, everything else 503")
	if waitAddr == "" {
		t.Fatalf("no listening line while waiting\n%s", errb.String())
	}
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusServiceUnavailable} {
		resp, err := http.Get("http://" + waitAddr + path)
		if err != nil || resp.StatusCode != want {
			t.Fatalf("GET %s while waiting: %v %v, want %d", path, resp, err, want)
		}
		resp.Body.Close()
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Post("http://"+waitAddr+"/triggers/frozen/Plain", "application/json", strings.NewReader(`{"n":0}`))
	if err != nil {
		t.Fatalf("POST while waiting: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("POST while waiting: %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	time.Sleep(6 * time.Second) // long enough to see a flood, if there were one
	if n := strings.Count(errb.String(), "database unavailable at start"); n < 1 || n > 3 {
		t.Errorf("%d waiting lines in 6s, want at most one every 5s", n)
	}
	if err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return strings.Contains(errb.String(), `"message":"listening"`) },
		"the node to come up once the database answers")
	log := errb.String()
	if strings.Contains(log, "hunter2") {
		t.Fatalf("the log shows the database password\n%s", log)
	}
	var opened string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `"message":"database opened"`) {
			opened = line
		}
	}
	if !strings.Contains(opened, `"node_id":"waiter"`) || !strings.Contains(opened, `"schema_version":"0`) || !strings.Contains(opened, `.sql"`) ||
		!strings.Contains(opened, `"database":"postgres://touba@127.0.0.1:`) {
		t.Fatalf("start-up log line %q: want the database without password, the node id and the schema version", opened)
	}
	// The same socket, handed on: no moment without a listener.
	addr := logAddr(log, "listening")
	if addr != waitAddr {
		t.Fatalf("listening on %s once up, on %s while waiting: want one socket", addr, waitAddr)
	}
	if st, _ := postTimed("http://"+addr, "frozen/Plain", "after-wait", `{"n":1}`, 10*time.Second); st != http.StatusAccepted {
		t.Fatalf("post after the wait: %d", st)
	}
	cmd.Process.Signal(syscall.SIGTERM)
}

// logAddr is the "addr" of the last log line whose message is msg.
func logAddr(log, msg string) string {
	var addr string
	for _, line := range strings.Split(log, "\n") {
		if i := strings.Index(line, `"addr":"`); i >= 0 && strings.Contains(line, `"message":"`+msg+`"`) {
			a := line[i+len(`"addr":"`):]
			addr = a[:strings.IndexByte(a, '"')]
		}
	}
	return addr
}
