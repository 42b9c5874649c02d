package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
)

const stubProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:ops/Bills", "source": {"kind": "webhook"},
   "steps": [{"id": "bill", "tool": "tool:ops/Bill", "input": {"bill": {"$ref": "/event/body"}}}]}]}`

const stubManifest = `{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:ops/Bill": {"handler": {"kind": "accounting_stub"},
    "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`

// child is a daemon started the way systemd starts it: with descriptors
// and environment testdaemon does not pass.
type child struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	log    strings.Builder
	ready  chan string // the "listening" address
	exited chan struct{}
}

func startChild(tb testing.TB, extra []*os.File, env []string, args ...string) *child {
	tb.Helper()
	c := &child{ready: make(chan string, 1), exited: make(chan struct{})}
	c.cmd = exec.Command(testkit.Binary(tb), args...)
	c.cmd.ExtraFiles = extra
	c.cmd.Env = append(os.Environ(), env...)
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() {
		defer close(c.exited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			c.mu.Lock()
			c.log.WriteString(sc.Text() + "\n")
			c.mu.Unlock()
			var m struct {
				Message   string `json:"message"`
				Addr      string `json:"addr"`
				Activated bool   `json:"socket_activated"`
			}
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.Message == "listening" {
				c.ready <- fmt.Sprintf("%s activated=%v", m.Addr, m.Activated)
			}
		}
		c.cmd.Wait()
	}()
	tb.Cleanup(func() {
		c.cmd.Process.Kill()
		<-c.exited
	})
	select {
	case got := <-c.ready:
		if len(extra) > 0 && !strings.HasSuffix(got, "activated=true") {
			tb.Fatalf("daemon did not take the activated socket: %s\n%s", got, c.logs())
		}
	case <-c.exited:
		tb.Fatalf("daemon exited before listening\n%s", c.logs())
	case <-time.After(opWait):
		tb.Fatalf("daemon did not listen\n%s", c.logs())
	}
	return c
}

func (c *child) logs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.log.String()
}

// stop sends SIGTERM and wants exit 0.
func (c *child) stop(tb testing.TB) {
	tb.Helper()
	c.cmd.Process.Signal(syscall.SIGTERM)
	c.wait(tb)
}

// wait wants the daemon to exit 0.
func (c *child) wait(tb testing.TB) {
	tb.Helper()
	select {
	case <-c.exited:
	case <-time.After(opWait):
		tb.Fatalf("daemon did not stop\n%s", c.logs())
	}
	if code := c.cmd.ProcessState.ExitCode(); code != 0 {
		tb.Fatalf("daemon exit %d\n%s", code, c.logs())
	}
}

// TestRestartUnderSocketActivation restarts the daemon while clients keep
// sending, the listening socket held open by the test as systemd holds it
// (passed as fd 3 with LISTEN_FDS=1; LISTEN_PID is left out, since the
// child's pid is unknown before it starts). Every request must get a 202
// and every acknowledged delivery must be in the queue: zero refused, zero
// lost.
func TestRestartUnderSocketActivation(t *testing.T) {
	e := newOpEnv(t, stubProgram, stubManifest)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lnFile, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer lnFile.Close()
	env := []string{"LISTEN_FDS=1", "LISTEN_FDNAMES=http"}
	args := e.serveArgs("--listen", "127.0.0.1:1") // unused: the activated socket wins
	d := startChild(t, []*os.File{lnFile}, env, args...)

	url := "http://" + ln.Addr().String() + "/triggers/ops/Bills"
	const clients = 8
	var (
		mu      sync.Mutex
		acked   = map[string]string{} // event id -> queue id
		refused []string
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	// A fresh connection per request (as many senders do): one accepted by
	// the old instance is served by it; one made after it stopped waits in
	// the socket's backlog for the new one.
	hc := &http.Client{Timeout: opWait, Transport: &http.Transport{DisableKeepAlives: true}}
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("c%d-%05d", c, i)
				req, _ := http.NewRequest("POST", url, strings.NewReader(fmt.Sprintf(`{"n":%d}`, i)))
				req.Header.Set("X-Touba-Event-Id", id)
				resp, err := hc.Do(req)
				if err != nil {
					mu.Lock()
					refused = append(refused, id+": "+err.Error())
					mu.Unlock()
					continue
				}
				var a struct {
					QueueID string `json:"queue_id"`
				}
				json.NewDecoder(resp.Body).Decode(&a)
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				if resp.StatusCode == 202 && a.QueueID != "" {
					acked[id] = a.QueueID
				} else {
					refused = append(refused, fmt.Sprintf("%s: status %d", id, resp.StatusCode))
				}
				mu.Unlock()
			}
		}(c)
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	testkit.WaitFor(t, opWait, func() bool { return count() >= 200 }, "traffic before the restart")
	d.stop(t)
	during := count()
	d = startChild(t, []*os.File{lnFile}, env, args...)
	testkit.WaitFor(t, opWait, func() bool { return count() >= during+200 }, "traffic after the restart")
	close(stop)
	wg.Wait()
	d.stop(t)

	if len(refused) > 0 {
		t.Fatalf("%d requests refused or failed across the restart, first: %v", len(refused), refused[:min(5, len(refused))])
	}
	all := testkit.Entries(t, e.queue)
	stored := map[string]string{}
	for _, x := range all {
		stored[x.EventID] = x.QueueID
	}
	lost := 0
	for id, qid := range acked {
		if stored[id] != qid {
			lost++
		}
	}
	t.Logf("sent and acknowledged %d deliveries (%d before the restart began), refused 0, lost %d", len(acked), during, lost)
	if lost > 0 || len(all) != len(acked) {
		t.Fatalf("lost %d acknowledged deliveries; %d entries for %d acknowledgements", lost, len(all), len(acked))
	}
}

// TestSDNotify checks READY=1, watchdog pings at half of WATCHDOG_USEC,
// and STOPPING=1 on SIGTERM, on a notify socket the test owns.
func TestSDNotify(t *testing.T) {
	e := newOpEnv(t, stubProgram, stubManifest)
	path := filepath.Join(e.dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs := make(chan string, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatalf("notify socket closed waiting for %s", what)
			}
			return m
		case <-time.After(opWait):
			t.Fatalf("no %s on the notify socket", what)
		}
		return ""
	}
	d := startChild(t, nil, []string{"NOTIFY_SOCKET=" + path, "WATCHDOG_USEC=200000"}, e.serveArgs()...)
	// Watchdog pings may come before READY=1: they start with the daemon.
	seenReady, pings := false, 0
	for !seenReady || pings < 3 {
		m := next("READY=1 and three watchdog pings")
		switch {
		case strings.HasPrefix(m, "READY=1"):
			seenReady = true
		case m == "WATCHDOG=1":
			pings++
		default:
			t.Fatalf("unexpected notify message %q", m)
		}
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	for {
		if m := next("STOPPING=1"); m == "STOPPING=1" {
			break
		} else if m != "WATCHDOG=1" {
			t.Fatalf("unexpected notify message %q", m)
		}
	}
	d.wait(t)
}

// TestSIGHUPReloads: a valid new program is served after SIGHUP; an
// invalid one is logged and the running one kept.
func TestSIGHUPReloads(t *testing.T) {
	e := newOpEnv(t, stubProgram, stubManifest)
	d := e.serve(t)
	url := d.URL() + "/triggers/ops/"
	if status, _ := testkit.Post(t, url+"Receipts", "r-1", `{}`); status != 404 {
		t.Fatalf("unknown trigger before reload: %d", status)
	}
	next := strings.Replace(stubProgram, `]}]}`, `]},
  {"ref": "trigger:ops/Receipts", "source": {"kind": "webhook"},
   "steps": [{"id": "bill", "tool": "tool:ops/Bill", "input": {"bill": {"$ref": "/event/body"}}}]}]}`, 1)
	if err := os.WriteFile(e.program, []byte(next), 0o600); err != nil {
		t.Fatal(err)
	}
	d.Signal(syscall.SIGHUP)
	d.WaitLog(`"configuration reloaded"`, opWait)
	if status, _ := testkit.Post(t, url+"Receipts", "r-1", `{}`); status != 202 {
		t.Fatalf("new trigger after reload: %d", status)
	}
	if err := os.WriteFile(e.program, []byte(`{"air_version": "touba-air-v1", "triggers": [{"ref": "nope"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	d.Signal(syscall.SIGHUP)
	d.WaitLog(`"reload refused; keeping the running configuration"`, opWait)
	if status, _ := testkit.Post(t, url+"Receipts", "r-2", `{}`); status != 202 {
		t.Fatalf("trigger after a refused reload: %d", status)
	}
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, d.Log())
	}
}
