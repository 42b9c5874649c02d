//go:build linux

package handler

import (
	"os"
	"os/exec"
	"sync"
	"syscall"
	"unsafe"
)

var isolation struct {
	once  sync.Once
	flags uintptr // clone flags that worked, 0 when none did
	user  bool    // whether a user namespace is needed (not root)
}

// NetworkIsolation reports whether a process handler without the network
// grant runs in a fresh network namespace on this host. It probes once, by
// starting a trivial program the ways it would start a handler.
func NetworkIsolation() bool {
	isolation.once.Do(probeIsolation)
	return isolation.flags != 0
}

func probeIsolation() {
	probe, args := probeCommand()
	if probe == "" {
		return
	}
	// Root can create a network namespace directly; anyone else (and root in
	// a container without CAP_SYS_ADMIN) may get one inside a user namespace.
	tries := []struct {
		flags uintptr
		user  bool
	}{{syscall.CLONE_NEWNET, false}, {syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET, true}}
	if os.Geteuid() != 0 {
		tries = tries[1:]
	}
	for _, t := range tries {
		cmd := exec.Command(probe, args...)
		cmd.Env = []string{}
		cmd.SysProcAttr = isolatedAttr(t.flags, t.user)
		if cmd.Run() == nil {
			isolation.flags, isolation.user = t.flags, t.user
			return
		}
	}
}

func probeCommand() (string, []string) {
	for _, p := range []string{"/bin/true", "/usr/bin/true"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("true"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/bin/sh"); err == nil {
		return "/bin/sh", []string{"-c", ":"}
	}
	return "", nil
}

func isolatedAttr(flags uintptr, user bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Cloneflags: flags}
	if user {
		// Map our own ids to themselves so files keep their owners.
		uid, gid := os.Getuid(), os.Getgid()
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		a.GidMappingsEnableSetgroups = false
	}
	return a
}

// procAttr is how a handler process starts: in its own process group, so a
// timeout can kill its children too, and without network when isolated.
func procAttr(isolate bool) *syscall.SysProcAttr {
	if isolate && NetworkIsolation() {
		return isolatedAttr(isolation.flags, isolation.user)
	}
	return &syscall.SysProcAttr{Setpgid: true}
}

// watchExit reports when the process has exited without reaping it, so the
// process group can still be killed safely: while the leader is an unreaped
// zombie its pid, which is the group id, cannot be reused. reap then
// collects the exit status.
func watchExit(cmd *exec.Cmd) (exited <-chan struct{}, reap func() *os.ProcessState) {
	ch := make(chan struct{})
	pid := cmd.Process.Pid
	go func() {
		defer close(ch)
		const pPID = 1 // P_PID
		var info [16]uint64
		for {
			_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
				uintptr(unsafe.Pointer(&info)), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
			if errno == 0 {
				return
			}
			if errno != syscall.EINTR {
				// Cannot wait without reaping (SIGCHLD ignored?): reap, and
				// let the group kill that follows take its small risk.
				_ = cmd.Wait()
				return
			}
		}
	}()
	return ch, func() *os.ProcessState {
		<-ch
		_ = cmd.Wait() // a second Wait only reports that it was called
		return cmd.ProcessState
	}
}
