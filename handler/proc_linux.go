//go:build linux

package handler

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"
)

// How a handler without the network grant is started, found once per
// daemon process by probeIsolation.
const (
	isoNone   = iota // no way worked: it runs with the host's network
	isoDirect        // the daemon clones it into the namespaces itself
	isoHelper        // through the isolation helper (isolate_linux.go)
)

var isolation struct {
	once  sync.Once
	how   int
	flags uintptr // with isoDirect: the clone flags that worked
	user  bool    // with isoDirect: whether a user namespace is needed
	all   bool    // with user: every id of the daemon's is mapped (root), not its own only
	err   error   // with isoNone: why the last way tried failed
}

// NetworkIsolation reports whether a process handler without the network
// grant runs in a fresh network namespace on this host. It probes once, by
// starting a trivial program the ways it would start a handler.
func NetworkIsolation() bool {
	isolation.once.Do(probeIsolation)
	return isolation.how != isoNone
}

// IsolationMethod says how a handler without the network grant starts on
// this host, for the log and `check`; err says why it cannot be isolated
// when NetworkIsolation is false.
func IsolationMethod() (method string, err error) {
	isolation.once.Do(probeIsolation)
	switch {
	case isolation.how == isoHelper:
		return "user and network namespace, through the isolation helper (not root)", nil
	case isolation.how == isoDirect && isolation.all:
		return "user and network namespace, every id mapped (root)", nil
	case isolation.how == isoDirect && isolation.user:
		return "user and network namespace", nil
	case isolation.how == isoDirect:
		return "network namespace (root; a handler that means to can setns back to the host's)", nil
	}
	return "", isolation.err
}

func probeIsolation() {
	probe, args := probeCommand()
	if probe == "" {
		isolation.err = errors.New("no true or sh to probe with")
		return
	}
	// Root starts it in a user namespace of its own with every id of the
	// daemon's mapped to itself: the handler keeps root's powers over files,
	// but holds no capability outside that namespace. In a bare network
	// namespace a root handler keeps CAP_SYS_ADMIN over the host's and can
	// setns(2) straight back into it (/proc/<daemon>/ns/net), so that is
	// only the fallback where user namespaces are refused. Anyone else (and
	// root in a container without CAP_SYS_ADMIN) may get one inside a user
	// namespace, which takes the helper once the daemon is non-dumpable.
	type try struct {
		how   int
		flags uintptr
		user  bool
		all   bool
	}
	userNet := uintptr(syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET)
	tries := []try{{isoDirect, userNet, true, true}, {isoDirect, syscall.CLONE_NEWNET, false, false},
		{isoDirect, userNet, true, false}, {isoHelper, 0, false, false}}
	if os.Geteuid() != 0 {
		tries = []try{{isoHelper, 0, false, false}}
	}
	for _, t := range tries {
		cmd := exec.Command(probe, args...)
		cmd.Env = []string{}
		var err error
		if t.how == isoHelper {
			err = runViaHelper(cmd)
		} else if cmd.SysProcAttr, err = isolatedAttr(t.flags, t.user, t.all); err == nil {
			err = cmd.Run()
		}
		if err == nil {
			isolation.how, isolation.flags, isolation.user, isolation.all = t.how, t.flags, t.user, t.all
			return
		}
		isolation.err = err
	}
}

// runViaHelper runs cmd to its end through the isolation helper.
func runViaHelper(cmd *exec.Cmd) error {
	h, status, w, err := helperCommand(cmd)
	if err != nil {
		return err
	}
	err = h.Start()
	w.Close()
	if err != nil {
		status.Close()
		return fmt.Errorf("start the isolation helper: %w", err)
	}
	if err := helperStarted(status); err != nil {
		_ = h.Wait()
		return err
	}
	return h.Wait()
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

func isolatedAttr(flags uintptr, user, all bool) (*syscall.SysProcAttr, error) {
	a := &syscall.SysProcAttr{Setpgid: true, Cloneflags: flags}
	switch {
	case user && all:
		// Every id this process has, mapped to itself: files keep their
		// owners and root's handler its powers over them (and setgroups,
		// for a runuser wrapper), inside the namespace only.
		uids, err := identityMap("/proc/self/uid_map")
		if err != nil {
			return nil, err
		}
		gids, err := identityMap("/proc/self/gid_map")
		if err != nil {
			return nil, err
		}
		a.UidMappings, a.GidMappings, a.GidMappingsEnableSetgroups = uids, gids, true
	case user:
		// Map our own ids to themselves so files keep their owners.
		uid, gid := os.Getuid(), os.Getgid()
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		a.GidMappingsEnableSetgroups = false
	}
	return a, nil
}

// identityMap maps each id range of this process's user namespace (a
// /proc/self/uid_map or gid_map) to itself.
func identityMap(file string) ([]syscall.SysProcIDMap, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var m []syscall.SysProcIDMap
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("%s: line %q", file, line)
		}
		inside, err1 := strconv.ParseUint(f[0], 10, 32)
		size, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil || size == 0 {
			return nil, fmt.Errorf("%s: line %q", file, line)
		}
		m = append(m, syscall.SysProcIDMap{ContainerID: int(inside), HostID: int(inside), Size: int(size)})
	}
	if len(m) == 0 {
		return nil, errors.New(file + " is empty")
	}
	return m, nil
}

// prepare makes cmd start in its own process group, so a timeout can kill
// its children too, and without network when isolate and the host can.
// Through the helper, the command to start is the helper, and status is
// the read end of its status pipe, w its write end (the parent closes it
// once started).
func prepare(cmd *exec.Cmd, isolate bool) (start *exec.Cmd, status, w *os.File, err error) {
	if !isolate || !NetworkIsolation() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		return cmd, nil, nil, nil
	}
	if isolation.how == isoHelper {
		return helperCommand(cmd)
	}
	a, err := isolatedAttr(isolation.flags, isolation.user, isolation.all)
	if err != nil {
		return nil, nil, nil, err
	}
	cmd.SysProcAttr = a
	return cmd, nil, nil, nil
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
