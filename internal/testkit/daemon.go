package testkit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/gobuild"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// moduleRoot finds the folder holding go.mod above this source file.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Binary builds cmd/touba-trigger (once) and returns its path. The test
// binary's TestMain must call gobuild.Main, which removes it at the end.
func Binary(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		dir, err := gobuild.Dir()
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "touba-trigger")
		buildErr = gobuild.Build(moduleRoot(), "./cmd/touba-trigger", binPath)
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return binPath
}

// Daemon is one running touba-trigger child: for the tests that need
// signals (SIGTERM, SIGHUP, SIGKILL) or a process of its own. The others
// run the server in process (StartServer).
type Daemon struct {
	tb   testing.TB
	Cmd  *exec.Cmd
	Addr string // the webhook listener, from the "listening" log line

	mu     sync.Mutex
	log    bytes.Buffer
	exited chan struct{}
	err    error
}

// Start runs the binary with args (the first being the subcommand) and
// extra environment, and waits until it logs its listening address.
func Start(tb testing.TB, env []string, args ...string) *Daemon {
	tb.Helper()
	return StartCmd(tb, exec.Command(Binary(tb), args...), env)
}

// StartCmd is Start for a command the test prepared itself (another copy
// of the binary, another user): cmd's environment becomes the test's plus
// env.
func StartCmd(tb testing.TB, cmd *exec.Cmd, env []string) *Daemon {
	tb.Helper()
	return start(tb, cmd, env, false)
}

// StartMayDie is Start for a daemon armed with a crash point that work
// left from an earlier run can reach before the daemon logs its listening
// address (its dispatcher recovers and leases while intake starts): a
// daemon that exits first is returned with no Addr, for the test to Wait
// on, instead of failing the test.
func StartMayDie(tb testing.TB, env []string, args ...string) *Daemon {
	tb.Helper()
	return start(tb, exec.Command(Binary(tb), args...), env, true)
}

func start(tb testing.TB, cmd *exec.Cmd, env []string, mayDie bool) *Daemon {
	tb.Helper()
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	d := &Daemon{tb: tb, Cmd: cmd, exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			d.mu.Lock()
			d.log.WriteString(line + "\n")
			d.mu.Unlock()
			var m struct {
				Message string `json:"message"`
				Addr    string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &m) == nil && m.Message == "listening" {
				select {
				case addr <- m.Addr:
				default:
				}
			}
		}
		d.err = cmd.Wait()
		close(d.exited)
	}()
	tb.Cleanup(func() {
		cmd.Process.Kill()
		<-d.exited
		if tb.Failed() {
			tb.Logf("daemon log:\n%s", d.Log())
		}
	})
	select {
	case d.Addr = <-addr:
	case <-d.exited:
		if mayDie {
			return d
		}
		tb.Fatalf("daemon exited before listening: %v\n%s", d.err, d.Log())
	case <-time.After(30 * time.Second):
		tb.Fatalf("daemon did not listen within 30s\n%s", d.Log())
	}
	return d
}

// Log returns what the daemon wrote to stderr so far.
func (d *Daemon) Log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

// URL returns the daemon's base URL.
func (d *Daemon) URL() string { return "http://" + d.Addr }

// Signal sends sig to the daemon.
func (d *Daemon) Signal(sig syscall.Signal) {
	if err := d.Cmd.Process.Signal(sig); err != nil {
		d.tb.Fatalf("signal %v: %v", sig, err)
	}
}

// Wait waits for the daemon to exit and returns its exit code (-1 when a
// signal killed it).
func (d *Daemon) Wait(timeout time.Duration) int {
	d.tb.Helper()
	select {
	case <-d.exited:
	case <-time.After(timeout):
		d.tb.Fatalf("daemon still running after %v\n%s", timeout, d.Log())
	}
	if d.Cmd.ProcessState == nil {
		d.tb.Fatalf("no process state: %v", d.err)
	}
	return d.Cmd.ProcessState.ExitCode()
}

// Kill sends SIGKILL and waits for the process to be gone.
func (d *Daemon) Kill() {
	d.tb.Helper()
	d.Signal(syscall.SIGKILL)
	d.Wait(10 * time.Second)
}

// WaitLog waits until the log holds substr; it fails at once if the
// daemon exits first.
func (d *Daemon) WaitLog(substr string, timeout time.Duration) {
	d.tb.Helper()
	WaitFor(d.tb, timeout, func() bool {
		if strings.Contains(d.Log(), substr) {
			return true
		}
		select {
		case <-d.exited:
			d.tb.Fatalf("daemon exited before logging %q", substr)
		default:
		}
		return false
	}, "the daemon to log "+strconv.Quote(substr))
}
