package journal_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/sqlite/journal"
)

// The test binary doubles as the child process of the crash and lock tests:
// TestMain runs the child's part when childEnv is set, and never returns.
const (
	childEnv = "TOUBA_JOURNAL_TEST_CHILD"
	pathEnv  = "TOUBA_JOURNAL_TEST_PATH"
)

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "lock":
		childLock(os.Getenv(pathEnv))
	case "dispatch":
		childDispatch(os.Getenv(pathEnv))
	default:
		fmt.Fprintln(os.Stderr, "unknown child mode")
		os.Exit(2)
	}
}

// childLock takes the lock, says so, and waits to be killed.
func childLock(path string) {
	if _, err := journal.AcquireLock(path, journal.LockOptions{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println("locked")
	select {}
}

// childDispatch prepares and dispatches one effect with crash points
// between the steps; the parent arms one of them.
func childDispatch(path string) {
	ctx := context.Background()
	j, err := journal.Open(ctx, path, journal.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if _, err := j.Prepare(ctx, prep("q1", "q1:charge", "call-1")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	crashpoint.Hit("test.after_prepare")
	if err := j.Dispatch(ctx, "q1", "q1:charge", "call-1"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	crashpoint.Hit("test.after_dispatch")
	fmt.Fprintln(os.Stderr, "crash point not reached")
	os.Exit(3)
}

// startChild re-executes the test binary in a child mode.
func startChild(tb testing.TB, mode, path string, env ...string) (*exec.Cmd, *bufio.Reader) {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, pathEnv+"="+path)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, bufio.NewReader(out)
}

// waitKilled waits for a child and checks that SIGKILL ended it.
func waitKilled(tb testing.TB, cmd *exec.Cmd) {
	tb.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		tb.Fatal("child did not end within 30s")
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		tb.Fatalf("child ended with %v, want killed by SIGKILL", cmd.ProcessState)
	}
}

func journalPath(tb testing.TB) string {
	tb.Helper()
	return filepath.Join(tb.TempDir(), "touba.effect-journal.sqlite")
}

// mustOpen opens a journal that is closed at the end of the test.
func mustOpen(tb testing.TB, path string, opts journal.Options) *journal.Journal {
	tb.Helper()
	j, err := journal.Open(context.Background(), path, opts)
	if err != nil {
		tb.Fatalf("open journal: %v", err)
	}
	tb.Cleanup(func() {
		if err := j.Close(); err != nil {
			tb.Errorf("close journal: %v", err)
		}
	})
	return j
}

// prep is a valid Prepare of an idempotency_key effect.
func prep(scope, effectID, callID string) touba.EffectPrepare {
	return touba.EffectPrepare{Scope: scope, EffectID: effectID, ToolRef: "tool:examples.orders/CreateOrder",
		Operation: touba.OperationInvoke, Fingerprint: "sha256:00ff", RetryMode: touba.RetryIdempotencyKey,
		CallID: callID}
}

// mustGet reads an effect that must exist.
func mustGet(tb testing.TB, j *journal.Journal, scope, effectID string) *touba.Effect {
	tb.Helper()
	e, err := j.Get(context.Background(), scope, effectID)
	if err != nil {
		tb.Fatalf("get %s/%s: %v", scope, effectID, err)
	} else if e == nil {
		tb.Fatalf("get %s/%s: no such effect", scope, effectID)
	}
	return e
}

func mustEvents(tb testing.TB, j *journal.Journal, scope, effectID string) []touba.EffectEvent {
	tb.Helper()
	ev, err := j.Events(context.Background(), scope, effectID)
	if err != nil {
		tb.Fatalf("events %s/%s: %v", scope, effectID, err)
	}
	return ev
}

// errorIs describes err for comparisons: the public code, or a sentinel.
func errorIs(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, touba.ErrEffectApplied):
		return "ErrApplied"
	case errors.Is(err, touba.ErrTransition):
		return "ErrTransition"
	}
	return touba.ErrorCode(err)
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }

func fuzzJournal(tb testing.TB, s *secret.Set) *journal.Journal {
	tb.Helper()
	return journal.NewForFuzz(journal.Options{Secrets: s})
}
