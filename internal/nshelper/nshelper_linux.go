//go:build linux

package nshelper

import (
	"os"
	"os/exec"
	"syscall"
	"time"
	"unsafe"
)

// Arg, as argv[1], makes the binary the isolation helper; argv[0] is Name
// (what ps shows), argv[2] the handler's path and argv[3:] its argv.
const (
	Arg      = "__touba-trigger-isolated-handler__"
	Name     = "touba-trigger-isolate"
	StatusFD = 3
	// StartFailed is the helper's exit code when the handler did not
	// start; the daemon reads the reason from the status pipe.
	StartFailed = 125
)

// Every program that links this package (the daemon, and the test binaries
// that run process handlers) can act as the helper, before main runs.
func init() {
	if len(os.Args) >= 4 && os.Args[1] == Arg {
		os.Exit(run(os.Args[2], os.Args[3:]))
	}
}

// run starts path with argv in a new user and network namespace, the
// helper's uid and gid mapped to themselves, and returns the exit code to
// exit with (after re-raising the handler's fatal signal, if any).
func run(path string, argv []string) int {
	status := os.NewFile(StatusFD, "status")
	syscall.CloseOnExec(StatusFD) // the handler must not inherit it
	uid, gid := os.Getuid(), os.Getgid()
	cmd := &exec.Cmd{Path: path, Args: argv, Env: os.Environ(),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}}}
	if err := cmd.Start(); err != nil {
		_, _ = status.WriteString("start " + path + " in a user and network namespace: " + err.Error())
		return StartFailed
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
		return StartFailed
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
