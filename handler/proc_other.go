//go:build unix && !linux

package handler

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// NetworkIsolation reports whether a process handler without the network
// grant runs without network access. Only Linux can isolate one.
func NetworkIsolation() bool { return false }

// IsolationMethod reports that this host cannot isolate a handler.
func IsolationMethod() (string, error) {
	return "", errors.New("network namespaces are Linux only")
}

// prepare makes cmd start in its own process group.
func prepare(cmd *exec.Cmd, _ bool) (start *exec.Cmd, status, w *os.File, err error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil, nil, nil
}

// helperStarted is never called here: there is no helper.
func helperStarted(*os.File) error { return nil }

// watchExit reaps the process when it exits. Without waitid(WNOWAIT) the
// group is killed just after the leader is reaped, which leaves a tiny
// window for pid reuse that Linux does not have.
func watchExit(cmd *exec.Cmd) (exited <-chan struct{}, reap func() *os.ProcessState) {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		_ = cmd.Wait()
	}()
	return ch, func() *os.ProcessState {
		<-ch
		return cmd.ProcessState
	}
}
