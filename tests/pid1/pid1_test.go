// Package pid1_test runs the real touba-trigger binary as pid 1 of a new
// pid namespace, as the shipped image runs it (issue 44): kill -9, start
// again as pid 1 with the image's command, and again, and checks that it
// comes up every time and that no acknowledged delivery is lost.
package pid1_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/cli"
	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/sqlite/journal"
)

func TestMain(m *testing.M) { gobuild.Main(m, nil) }

// cycles is how many kill -9 and restarts the test goes through.
const cycles = 20

// imageCommand reads the image's command line from deploy/Containerfile
// (its ENTRYPOINT and CMD), with /etc/touba moved to etc.
func imageCommand(t *testing.T, etc string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "Containerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var cmd []string
	for _, key := range []string{"ENTRYPOINT", "CMD"} {
		m := regexp.MustCompile(`(?m)^` + key + ` (\[.*\])$`).FindSubmatch(b)
		var part []string
		if m == nil || json.Unmarshal(m[1], &part) != nil {
			t.Fatalf("no %s [...] line in deploy/Containerfile", key)
		}
		cmd = append(cmd, part...)
	}
	if cmd[0] != "/usr/bin/touba-trigger" {
		t.Fatalf("image entrypoint %q, want /usr/bin/touba-trigger", cmd[0])
	}
	for i := range cmd {
		cmd[i] = strings.Replace(cmd[i], "/etc/touba", etc, 1)
	}
	return cmd[1:]
}

// canUnshare reports whether this host lets us make a pid namespace.
func canUnshare(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare on this host")
	}
	out, err := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", "echo $$").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Skipf("cannot run a process as pid 1 of a new pid namespace here: %v %s", err, out)
	}
}

// pid1 is one daemon running as pid 1 of its own pid namespace.
type pid1 struct {
	*testkit.Daemon
	pid int // the daemon's pid here, in the test's namespace
}

// start runs the image's command as pid 1 of a new pid namespace, with the
// image's environment moved to dir, and waits until it listens.
func start(t *testing.T, dir string, args []string) pid1 {
	t.Helper()
	// --kill-child: should the test kill unshare, the daemon dies with it.
	cmd := exec.Command("unshare", append([]string{"--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL",
		testkit.Binary(t)}, args...)...)
	d := testkit.StartCmd(t, cmd, []string{
		"STATE_DIRECTORY=" + filepath.Join(dir, "state"), "RUNTIME_DIRECTORY=" + filepath.Join(dir, "run"),
		"TOUBA_LISTEN=127.0.0.1:0", "TOUBA_METRICS_LISTEN=", "TOUBA_LOG_FORMAT=json"})
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("children of unshare: %q", b)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil || !regexp.MustCompile(`(?m)^NSpid:\s+\d+\s+1$`).Match(status) {
		t.Fatalf("the daemon (pid %d here) is not pid 1 of its namespace: %v\n%s", pid, err, status)
	}
	return pid1{Daemon: d, pid: pid}
}

// acks are the deliveries the daemon acknowledged (202): event id to
// queue id. A post the kill cut short is not acknowledged, nor counted.
type acks struct {
	mu sync.Mutex
	m  map[string]string
}

func (a *acks) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.m)
}

// body is the delivery of event id.
func body(id string) string { return fmt.Sprintf(`{"invoice":%q}`, id) }

// load posts deliveries to url until stop is closed.
func (a *acks) load(url string, stop <-chan struct{}, first int) {
	c := http.Client{Timeout: 10 * time.Second}
	for i := first; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		id := fmt.Sprintf("evt-%d", i)
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body(id)))
		req.Header.Set("X-Touba-Event-Id", id)
		resp, err := c.Do(req)
		if err != nil {
			continue
		}
		var ans struct {
			QueueID string `json:"queue_id"`
		}
		if json.NewDecoder(resp.Body).Decode(&ans) == nil && resp.StatusCode == http.StatusAccepted && ans.QueueID != "" {
			a.mu.Lock()
			a.m[id] = ans.QueueID
			a.mu.Unlock()
		}
		resp.Body.Close()
	}
}

// TestPID1KilledAndRestarted is issue 44: the daemon as pid 1, killed with
// SIGKILL under load, must come back as pid 1 with the image's command
// (which takes over the stale lock: its holder, pid 1 of a namespace that
// is gone, is dead, though the new daemon has its pid), and keep every
// delivery it acknowledged.
func TestPID1KilledAndRestarted(t *testing.T) {
	canUnshare(t)
	dir := t.TempDir()
	etc := filepath.Join(dir, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"program.air.json", "touba.manifest.json", "dev-webhook-secret"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "examples", "quickstart", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(etc, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	args := imageCommand(t, etc)
	queuePath := filepath.Join(dir, "state", cli.DefaultQueueFile)
	journalPath := filepath.Join(dir, "state", cli.DefaultJournalFile)

	acked := &acks{m: map[string]string{}}
	for cycle := 1; cycle <= cycles; cycle++ {
		d := start(t, dir, args)
		if cycle > 1 && !strings.Contains(d.Log(), "took over a stale journal lock") {
			t.Fatalf("cycle %d: the restart did not report taking over the stale lock\n%s", cycle, d.Log())
		}
		// Load until a few more deliveries were acknowledged, then kill -9
		// while it goes on.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			acked.load(d.URL()+"/triggers/examples.billing/Invoice", stop, cycle*1_000_000)
		}()
		before := acked.len()
		testkit.WaitFor(t, 30*time.Second, func() bool { return acked.len() >= before+5 }, "deliveries acknowledged")
		if err := syscall.Kill(d.pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		d.Wait(10 * time.Second)
		close(stop)
		wg.Wait()
		r, err := journal.ReadLock(journalPath)
		if err != nil || r == nil || r.PID != 1 {
			t.Fatalf("cycle %d: the killed daemon left %+v, %v; want a record of pid 1", cycle, r, err)
		}
		// Every acknowledged delivery is on disk.
		have := map[string]*touba.Delivery{}
		for _, e := range testkit.Entries(t, queuePath) {
			have[e.QueueID] = e
		}
		for id, qid := range acked.m {
			if have[qid] == nil {
				t.Fatalf("cycle %d: %s, acknowledged as %s, is not in the queue", cycle, id, qid)
			}
		}
	}

	// A last start, as pid 1 again: every acknowledged delivery ends done.
	d := start(t, dir, args)
	url := d.URL() + "/triggers/examples.billing/Invoice"
	for id, qid := range acked.m {
		testkit.WaitFor(t, 60*time.Second, func() bool {
			status, q := testkit.Post(t, url, id, body(id))
			if q != qid || (status != http.StatusAccepted && status != http.StatusOK) {
				t.Fatalf("redelivery of %s: status %d naming %q, acknowledged as %s; want 202 or 200", id, status, q, qid)
			}
			return status == http.StatusOK
		}, "the entry of "+id+" taken by the dispatcher")
	}
	if err := syscall.Kill(d.pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.Wait(60 * time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0\n%s", code, d.Log())
	}
	done := 0
	for _, e := range testkit.Entries(t, queuePath) {
		if e.Status == touba.StatusDone {
			done++
		} else {
			t.Errorf("entry %s (%s) is %s, want done", e.QueueID, e.EventID, e.Status)
		}
	}
	t.Logf("%d cycles, %d deliveries acknowledged, %d entries done", cycles, len(acked.m), done)
}
