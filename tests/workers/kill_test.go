package workers_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// proc is a testdata/worker process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  bytes.Buffer
}

// startWorker runs testdata/worker against w's daemon; it records each
// call in remote and hangs on them while hang exists.
func startWorker(t *testing.T, w *world, remote, hang string, maxInFlight int) *proc {
	t.Helper()
	return startWorkerAt(t, w.d.URL(), remote, hang, maxInFlight)
}

// startWorkerAt is startWorker connected to the daemon at url.
func startWorkerAt(t *testing.T, url, remote, hang string, maxInFlight int) *proc {
	t.Helper()
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.Command(workerBin)
	p.cmd.Env = append(os.Environ(), "URL="+url, "TOKEN="+token, "TOOL="+postTool, "REMOTE="+remote, "HANG="+hang,
		fmt.Sprintf("MAX_IN_FLIGHT=%d", maxInFlight))
	p.cmd.Stderr = &p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// remoteLine is one call the worker process ran.
type remoteLine struct {
	EffectID string `json:"effect_id"`
	CallID   string `json:"call_id"`
	EventID  string `json:"event_id"`
	PID      int    `json:"pid"`
}

func readRemote(t *testing.T, path string) []remoteLine {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	var out []remoteLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var l remoteLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("remote line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// TestWorkerKilledMidCall: a worker SIGKILLed while it holds a call
// never answers; timeout_ms after the call was handed out it is unknown
// (SPEC §4.3), and then §5's table: under idempotency_key it is handed
// again, with the same effect id, to the next worker; under reconcile
// and none the entry is parked and the call is never sent again.
func TestWorkerKilledMidCall(t *testing.T) { eachBackend(t, tWorkerKilledMidCall) }

func tWorkerKilledMidCall(t *testing.T, backend string) {
	for _, tc := range []struct {
		mode, status, code string
	}{
		{touba.RetryIdempotencyKey, touba.StatusDone, ""},
		{touba.RetryReconcile, touba.StatusParked, touba.EEffectReconciliationRequired},
		{touba.RetryNone, touba.StatusParked, touba.EEffectOutcomeUnknown},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			w := newWorld(t, backend, tc.mode, 2000)
			w.start("--workers", "4")
			remote, hang := filepath.Join(w.dir, "remote.jsonl"), filepath.Join(w.dir, "hang")
			if err := os.WriteFile(hang, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			p := startWorker(t, w, remote, hang, 4)
			w.send(orders, "evt-1")
			testkit.WaitFor(t, 20*time.Second, func() bool { return len(readRemote(t, remote)) == 1 }, "the worker to hold the call")
			p.kill()
			if err := os.Remove(hang); err != nil {
				t.Fatal(err)
			}
			startWorker(t, w, remote, hang, 4)
			w.waitStatus(tc.status, orders, 1, 30*time.Second)
			lines := readRemote(t, remote)
			w.stop()
			switch tc.mode {
			case touba.RetryIdempotencyKey:
				if len(lines) != 2 || lines[0].EffectID != lines[1].EffectID || lines[0].CallID == lines[1].CallID {
					t.Fatalf("calls %+v, want two calls of one effect", lines)
				}
			default:
				if len(lines) != 1 {
					t.Fatalf("calls %+v, want the one call only", lines)
				}
				if code := w.entryError(w.ids["evt-1"]); code != tc.code {
					t.Fatalf("entry parked with %s, want %s", code, tc.code)
				}
			}
			effects, _ := w.effects()
			want := touba.EffectApplied
			if tc.mode != touba.RetryIdempotencyKey {
				want = touba.EffectUnknown
			}
			if len(effects) != 1 || effects[0].State != want {
				t.Fatalf("effects %+v, want one %s", effects, want)
			}
		})
	}
}

// TestDaemonKilledWithCallsHandedOut: SIGKILL of the daemon while a
// worker holds calls, and while others were answered: after a restart
// nothing accepted is lost, the calls the journal says were applied are
// never sent again, and those handed out (dispatched, now unknown) are
// handed again under their effect ids.
func TestDaemonKilledWithCallsHandedOut(t *testing.T) {
	eachBackend(t, tDaemonKilledWithCallsHandedOut)
}

func tDaemonKilledWithCallsHandedOut(t *testing.T, backend string) {
	w := newWorld(t, backend, touba.RetryIdempotencyKey, 30000)
	w.start("--workers", "8")
	remote, hang := filepath.Join(w.dir, "remote.jsonl"), filepath.Join(w.dir, "hang")
	p := startWorker(t, w, remote, hang, 8)
	var applied, held []string
	for i := range 10 {
		applied = append(applied, fmt.Sprintf("ok-%02d", i))
	}
	w.send(orders, applied...)
	w.waitStatus(touba.StatusDone, orders, len(applied), 30*time.Second)
	if err := os.WriteFile(hang, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		held = append(held, fmt.Sprintf("held-%02d", i))
	}
	w.send(orders, held...)
	testkit.WaitFor(t, 20*time.Second, func() bool { return len(readRemote(t, remote)) == len(applied)+len(held) },
		"the worker to hold the calls")
	w.d.Kill()
	p.kill()
	if err := os.Remove(hang); err != nil {
		t.Fatal(err)
	}
	w.start("--workers", "8")
	startWorker(t, w, remote, hang, 8)
	w.waitStatus(touba.StatusDone, orders, len(applied)+len(held), 60*time.Second)
	w.stop()
	seen := map[string]int{}
	for _, l := range readRemote(t, remote) {
		seen[l.EventID]++
	}
	for _, id := range applied {
		if seen[id] != 1 {
			t.Errorf("%s (applied before the kill) sent %d times", id, seen[id])
		}
	}
	for _, id := range held {
		if seen[id] != 2 {
			t.Errorf("%s (held by the worker at the kill) sent %d times, want 2 (once more, same effect)", id, seen[id])
		}
	}
	effects, _ := w.effects()
	if len(effects) != len(applied)+len(held) {
		t.Fatalf("%d effects, want %d", len(effects), len(applied)+len(held))
	}
	for _, e := range effects {
		if e.State != touba.EffectApplied {
			t.Errorf("effect %s: %s", e.EffectID, e.State)
		}
	}
}
