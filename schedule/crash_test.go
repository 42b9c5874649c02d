package schedule_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/schedule"
)

// The after-tick crash point: a child process (this test binary) runs a
// scheduler over a queue kept in a file, killed after its first tick was
// enqueued and before the scheduler took it as done; the next start, on
// the same file, enqueues the ticks still due and none of them twice.

const (
	tickChildEnv = "TOUBA_SCHEDULE_CRASH_CHILD"
	tickFileEnv  = "TOUBA_SCHEDULE_CRASH_FILE"
)

// fileQueue is a queue of ticks in a file, one "ref at" a line, synced:
// what a child enqueued before it was killed is there for the next start.
type fileQueue struct {
	mu     sync.Mutex
	path   string
	offers int
}

func (q *fileQueue) read() []string {
	b, _ := os.ReadFile(q.path)
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func (q *fileQueue) EnqueueTick(_ context.Context, ref string, at time.Time) (string, string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.offers++
	line := ref + " " + at.UTC().Format(time.RFC3339)
	if slices.Contains(q.read(), line) {
		return touba.IntakeDuplicate, "q", nil
	}
	f, err := os.OpenFile(q.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		return "", "", err
	}
	return touba.IntakeEnqueued, "q", f.Sync()
}

func (q *fileQueue) LatestTickID(_ context.Context, ref string) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	latest := ""
	for _, l := range q.read() {
		if r, at, _ := strings.Cut(l, " "); r == ref && at > latest {
			latest = at
		}
	}
	return latest, nil
}

var (
	crashNow  = utc("2026-12-01T10:00:30Z")
	crashSpec = func(t *testing.T) schedule.Spec {
		return schedule.Spec{Ref: "trigger:a", Cron: mustParse(t, "* * * * *"), Location: time.UTC, CatchUp: schedule.CatchUpAll}
	}
)

// TestScheduleCrashChild is the child's part; it does nothing in a
// normal run.
func TestScheduleCrashChild(t *testing.T) {
	if os.Getenv(tickChildEnv) == "" {
		t.Skip("the crash test's child process")
	}
	q := &fileQueue{path: os.Getenv(tickFileEnv)}
	s := schedule.New([]schedule.Spec{crashSpec(t)}, schedule.Options{Enqueue: q, Ticks: q,
		Clock: schedule.NewManual(crashNow), Log: zerolog.Nop()})
	s.Start(context.Background())
	defer s.Close()
	// Killed by the crash point; a child that outlives it fails here.
	waitFor(t, func() bool { return false }, "the after-tick crash point")
}

func TestScheduleCrashAfterTick(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	path := filepath.Join(t.TempDir(), "ticks")
	// The last tick of a run before: 09:58 and 09:59 were missed since,
	// then 10:00 came while no daemon ran.
	if err := os.WriteFile(path, []byte("trigger:a 2026-12-01T09:57:00Z\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestScheduleCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), tickChildEnv+"=1", tickFileEnv+"="+path, crashpoint.Env+"="+schedule.CrashAfterTick)
	out, err := cmd.CombinedOutput()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v (%v), want killed by SIGKILL:\n%s", cmd.ProcessState, err, out)
	}
	q := &fileQueue{path: path}
	if got, want := q.read(), []string{"trigger:a 2026-12-01T09:57:00Z", "trigger:a 2026-12-01T09:58:00Z"}; !slices.Equal(got, want) {
		t.Fatalf("after the crash the queue holds %q, want %q", got, want)
	}

	// The next start, on the same queue.
	s := schedule.New([]schedule.Spec{crashSpec(t)}, schedule.Options{Enqueue: q, Ticks: q,
		Clock: schedule.NewManual(crashNow), Log: zerolog.Nop()})
	s.Start(context.Background())
	defer s.Close()
	want := []string{"trigger:a 2026-12-01T09:57:00Z", "trigger:a 2026-12-01T09:58:00Z",
		"trigger:a 2026-12-01T09:59:00Z", "trigger:a 2026-12-01T10:00:00Z"}
	waitFor(t, func() bool { return len(q.read()) == len(want) }, "the ticks still due")
	s.Close()
	if got := q.read(); !slices.Equal(got, want) {
		t.Fatalf("after the restart the queue holds %q, want %q", got, want)
	}
	// No tick was offered twice: the enqueued one is the cursor.
	if q.offers != 2 {
		t.Fatalf("%d ticks offered after the restart, want 2 (09:59, 10:00)", q.offers)
	}
}
