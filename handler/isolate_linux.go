//go:build linux

package handler

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
	"unsafe"
)

// The isolation helper. A daemon that is not root needs a user namespace
// to get a network namespace, and the parent of a process in a new user
// namespace writes its uid and gid maps in /proc/<child>/. The daemon is
// non-dumpable (server.Harden), a state its forked child keeps until
// execve, so those files belong to root and the daemon cannot write them.
// Nor can a Go process unshare a user namespace for itself: the kernel
// refuses CLONE_NEWUSER to a multithreaded process. So the daemon starts
// its own binary again (/proc/self/exe) with helperArg: that process is
// dumpable after its execve, starts the real handler in the new user and
// network namespaces, writes its maps, and relays its exit status.
//
// The helper runs with the binding's environment only (it has nothing
// else to hide: the handler is as dumpable and holds the same variables),
// stays in the handler's process group so the group kill reaches both, and
// hands the handler its own stdin, stdout and stderr. It tells the daemon
// whether the handler started on fd 3 (helperStatusFD): one zero byte once
// the handler's execve succeeded, else the error's text. A start that
// fails is then not_applied, as a failed direct start is.

// helperArg, as argv[1], makes the binary the isolation helper; argv[0]
// is helperName (what ps shows), argv[2] the handler's path and argv[3:]
// its argv.
const (
	helperArg      = "__touba-trigger-isolated-handler__"
	helperName     = "touba-trigger-isolate"
	helperStatusFD = 3
	// helperStartFailed is the helper's exit code when the handler did not
	// start; the daemon reads the reason from the status pipe.
	helperStartFailed = 125
)

// Every program that links this package (the daemon, and the test binaries
// that run process handlers) can act as the helper, before main runs.
func init() {
	if len(os.Args) >= 4 && os.Args[1] == helperArg {
		os.Exit(runHelper(os.Args[2], os.Args[3:]))
	}
}

// runHelper starts path with argv in a new user and network namespace, the
// helper's uid and gid mapped to themselves, and returns the exit code to
// exit with (after re-raising the handler's fatal signal, if any).
func runHelper(path string, argv []string) int {
	status := os.NewFile(helperStatusFD, "status")
	if status == nil {
		return helperStartFailed
	}
	syscall.CloseOnExec(helperStatusFD) // the handler must not inherit it
	a := isolatedAttr(syscall.CLONE_NEWUSER|syscall.CLONE_NEWNET, true)
	a.Setpgid = false // stay in the group the daemon kills
	cmd := &exec.Cmd{Path: path, Args: argv, Env: os.Environ(), SysProcAttr: a,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(status, "start %s in a user and network namespace: %v", path, err)
		return helperStartFailed
	}
	_, _ = status.Write([]byte{0})
	status.Close()
	// The handler holds its own copies: the daemon sees the end of its
	// stdout when the handler (and whatever it started) closes it.
	os.Stdin.Close()
	os.Stdout.Close()
	_ = cmd.Wait()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		return helperStartFailed
	case ws.Signaled():
		raise(ws.Signal())
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// raise ends the helper by sig, the way its handler ended, so the daemon
// sees the same status. The Go runtime's own handler would turn most
// signals into exit code 2: the default action is restored first, and no
// second core file is written.
func raise(sig syscall.Signal) {
	_ = syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{})
	var dfl [4]uint64 // struct sigaction, all zero: SIG_DFL, no flags, empty mask
	_, _, _ = syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
	_ = syscall.Kill(os.Getpid(), sig)
	// A signal to oneself that is not blocked arrives before kill returns;
	// this only bounds the wait if it does not end the process.
	time.Sleep(100 * time.Millisecond)
}

// helperCommand returns the command that starts cmd through the helper,
// and the read end of its status pipe. cmd must not be started; the
// helper gets its directory and environment.
func helperCommand(cmd *exec.Cmd) (*exec.Cmd, *os.File, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("pipe: %w", err)
	}
	h := &exec.Cmd{Path: "/proc/self/exe", Args: append([]string{helperName, helperArg, cmd.Path}, cmd.Args...),
		Dir: cmd.Dir, Env: cmd.Env, ExtraFiles: []*os.File{w},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	return h, r, w, nil
}

// helperStarted reads the helper's status pipe to its end: nil once the
// handler runs, else why it does not.
func helperStarted(r *os.File) error {
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, 4096))
	switch {
	case err != nil:
		return fmt.Errorf("isolation helper status: %w", err)
	case len(b) == 1 && b[0] == 0:
		return nil
	case len(b) == 0:
		return errors.New("isolation helper ended before starting the handler")
	}
	return errors.New(string(b))
}
