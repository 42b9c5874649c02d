package main_test

import (
	"fmt"
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

const e2eProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:e2e/Orders", "source": {"kind": "webhook"},
   "steps": [{"id": "post", "tool": "tool:e2e/Post", "input": {"order": {"$ref": "/event/body"}}}]}]}`

const e2eManifest = `{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:e2e/Post": {"handler": {"kind": "accounting_stub"},
    "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`

type files struct{ dir, program, manifest, queue, state, journal string }

func writeFiles(t *testing.T, program, manifest string) files {
	t.Helper()
	dir := t.TempDir()
	f := files{dir: dir, program: filepath.Join(dir, "program.air.json"), manifest: filepath.Join(dir, "touba.manifest.json"),
		queue: filepath.Join(dir, "q.sqlite"), state: filepath.Join(dir, "s.sqlite"), journal: filepath.Join(dir, "j.sqlite")}
	if err := os.WriteFile(f.program, []byte(program), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.manifest, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f files) serveArgs(extra ...string) []string {
	return append([]string{"serve", f.program, "--manifest", f.manifest, "--queue", f.queue, "--state", f.state,
		"--effect-journal", f.journal, "--listen", "127.0.0.1:0", "--metrics-listen", "",
		"--admin-socket", filepath.Join(f.dir, "admin.sock"), "--log-level", "info"}, extra...)
}

// TestKillAfterLastAcceptLosesNothing sends N deliveries from several
// clients, SIGKILLs the daemon right after the last 202, restarts it on
// the same files and finds every acknowledged entry.
func TestKillAfterLastAcceptLosesNothing(t *testing.T) {
	f := writeFiles(t, e2eProgram, e2eManifest)
	d := testkit.Start(t, nil, f.serveArgs()...)
	url := d.URL() + "/triggers/e2e/Orders"

	const n, clients = 400, 8
	var mu sync.Mutex
	acked := map[string]string{} // event id -> queue id
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := c; i < n; i += clients {
				id := fmt.Sprintf("evt-%04d", i)
				status, qid := testkit.Post(t, url, id, fmt.Sprintf(`{"order_id":%d}`, i))
				if status != 202 || qid == "" {
					t.Errorf("%s: status %d", id, status)
					return
				}
				mu.Lock()
				acked[id] = qid
				mu.Unlock()
			}
		}(c)
	}
	wg.Wait()
	d.Kill() // right after the last 202: no graceful anything
	if t.Failed() {
		return
	}

	// The lock record of the killed daemon is refused until taken over.
	if code, out := runOnce(t, f.serveArgs()...); code != 3 || !strings.Contains(out, "stale") {
		t.Fatalf("restart over a stale lock: exit %d, want 3 naming the stale lock\n%s", code, out)
	}
	d2 := testkit.Start(t, nil, f.serveArgs("--take-over-stale-lock")...)
	// Redelivering every event must name the same entry: it is on disk.
	// (202 duplicate while pending; 200 consumed once a dispatcher took it.)
	for id, qid := range acked {
		var i int
		fmt.Sscanf(id, "evt-%d", &i)
		status, got := testkit.Post(t, d2.URL()+"/triggers/e2e/Orders", id, fmt.Sprintf(`{"order_id":%d}`, i))
		if (status != 202 && status != 200) || got != qid {
			t.Fatalf("%s: redelivery answered %d %q, acknowledged as %s", id, status, got, qid)
		}
	}
	d2.Signal(syscall.SIGTERM)
	if code := d2.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM\n%s", code, d2.Log())
	}
	all := testkit.Entries(t, f.queue)
	byID := map[string]string{}
	for _, e := range all {
		byID[e.EventID] = e.QueueID
	}
	if got, want := len(all), n; got != want {
		t.Fatalf("entries=%d, want %d", got, want)
	}
	for id, qid := range acked {
		if byID[id] != qid {
			t.Fatalf("acknowledged %s (%s) not found after kill and restart", id, qid)
		}
	}
}

// runOnce runs the binary to completion and returns its exit code and
// output.
func runOnce(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(testkit.Binary(t), args...)
	out, _ := cmd.CombinedOutput()
	return cmd.ProcessState.ExitCode(), string(out)
}

func TestSIGTERMExitsCleanly(t *testing.T) {
	f := writeFiles(t, e2eProgram, e2eManifest)
	d := testkit.Start(t, nil, f.serveArgs()...)
	if status, _ := testkit.Post(t, d.URL()+"/triggers/e2e/Orders", "a", `{}`); status != 202 {
		t.Fatalf("status %d", status)
	}
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d\n%s", code, d.Log())
	}
	if !strings.Contains(d.Log(), `"stopped"`) {
		t.Fatalf("no clean stop in log:\n%s", d.Log())
	}
}
