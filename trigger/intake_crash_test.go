package trigger_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/trigger"
)

// The crash points of intake: a child process (this test binary) takes
// deliveries with one point armed, recording each step it reaches in a
// file that is synced as it goes; SIGKILL must come right after the
// queue's answer to a delivery that matched (after-match) or cancelled
// (after-cancel), before the dispatcher is told and before the sender's
// answer, and never for a delivery that did neither.

const (
	crashChildEnv = "TOUBA_TRIGGER_CRASH_CHILD" // the child's mode: "http" or "tick"
	crashFileEnv  = "TOUBA_TRIGGER_CRASH_FILE"
)

// crashProgram: b's deliveries are awaited by a, x's cancel c's entries,
// and the schedule's ticks are both awaited (w) and cancel (c).
const crashProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:plain", "source": {"kind": "webhook"}, "steps": [{"id": "s", "tool": "tool:x/Y"}]},
  {"ref": "trigger:a", "source": {"kind": "webhook"}, "steps": [{"id": "w", "wait_for": {"trigger": "trigger:b", "match": {"$ref": "/event/body/k"}, "on": "/body/k"}}]},
  {"ref": "trigger:b", "source": {"kind": "webhook"}, "steps": []},
  {"ref": "trigger:x", "source": {"kind": "webhook"}, "steps": []},
  {"ref": "trigger:c", "source": {"kind": "webhook"}, "steps": [{"id": "s", "tool": "tool:x/Y"}],
   "cancel_on": [{"trigger": "trigger:x", "match": {"$ref": "/event/body/k"}, "on": "/body/k"},
                 {"trigger": "trigger:tick", "match": {"$ref": "/event/body/k"}, "on": "/body/scheduled_for"}]},
  {"ref": "trigger:w", "source": {"kind": "webhook"}, "steps": [{"id": "w", "wait_for": {"trigger": "trigger:tick", "match": {"$ref": "/event/body/k"}, "on": "/body/scheduled_for"}}]},
  {"ref": "trigger:tick", "source": {"kind": "schedule", "cron": "0 3 * * *"}, "steps": []}]}`

// steps is the child's record, one line per step, synced.
type steps struct{ f *os.File }

func (s steps) add(format string, args ...any) {
	fmt.Fprintf(s.f, format+"\n", args...)
	if err := s.f.Sync(); err != nil {
		panic(err)
	}
}

// stepQueue records each enqueue, then answers as a queue that matched
// (Offers) or cancelled (Cancels) one entry.
type stepQueue struct{ log steps }

func (q stepQueue) Enqueue(_ context.Context, d *touba.Delivery) (touba.EnqueueResult, error) {
	res := touba.EnqueueResult{QueueID: "q-" + d.EventID, Created: true, Digest: d.Digest, Status: touba.StatusPending}
	if len(d.Offers) > 0 {
		res.Matched = []string{"q-waiter"}
	}
	if len(d.Cancels) > 0 {
		res.Cancelled = []string{"q-cancelled"}
	}
	q.log.add("enqueued %s", d.EventID)
	return res, nil
}

// TestIntakeCrashChild is the child's part; it does nothing in a normal
// run.
func TestIntakeCrashChild(t *testing.T) {
	mode := os.Getenv(crashChildEnv)
	if mode == "" {
		t.Skip("the crash tests' child process")
	}
	f, err := os.OpenFile(os.Getenv(crashFileEnv), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	log := steps{f}
	p, err := trigger.ParseProgram("p.json", []byte(crashProgram))
	if err != nil {
		t.Fatal(err)
	}
	in := &trigger.Intake{Queue: stepQueue{log}, Enqueued: func() { log.add("notified") }}
	in.SetConfig(&trigger.Config{Program: p})
	if mode == "tick" {
		at := time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC)
		if _, _, err := in.EnqueueTick(context.Background(), "trigger:tick", at); err != nil {
			t.Fatal(err)
		}
		log.add("answered %s", trigger.TickEventID(at))
		return
	}
	h := in.Router(nil)
	for _, d := range []struct{ name, id string }{{"plain", "e0"}, {"b", "e1"}, {"x", "e2"}} {
		r := httptest.NewRequest(http.MethodPost, "/triggers/"+d.name, strings.NewReader(`{"k":"v"}`))
		r.Header.Set("X-Touba-Event-Id", d.id)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		log.add("answered %s %d", d.id, w.Code)
	}
}

func TestIntakeCrashPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	for _, tt := range []struct {
		mode, point string
		want        []string // the child's record when it was killed
	}{
		{"http", trigger.CrashAfterMatch, []string{"enqueued e0", "notified", "answered e0 202", "enqueued e1"}},
		{"http", trigger.CrashAfterCancel, []string{"enqueued e0", "notified", "answered e0 202",
			"enqueued e1", "notified", "answered e1 202", "enqueued e2"}},
		{"tick", trigger.CrashAfterMatch, []string{"enqueued 2026-12-02T02:00:00Z"}},
		{"tick", trigger.CrashAfterCancel, []string{"enqueued 2026-12-02T02:00:00Z"}},
	} {
		t.Run(tt.mode+"/"+tt.point, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "steps")
			if err := os.WriteFile(file, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestIntakeCrashChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), crashChildEnv+"="+tt.mode, crashFileEnv+"="+file, crashpoint.Env+"="+tt.point)
			out, err := cmd.CombinedOutput()
			ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("child ended with %v (%v), want killed by SIGKILL:\n%s", cmd.ProcessState, err, out)
			}
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := strings.TrimSpace(string(b)), strings.Join(tt.want, "\n"); got != want {
				t.Fatalf("child's record:\n%s\nwant\n%s", got, want)
			}
		})
	}
}
