//go:build unix && !linux

package handler

import (
	"os"
	"os/exec"
	"syscall"
)

// NetworkIsolation reports whether a process handler without the network
// grant runs without network access. Only Linux can isolate one.
func NetworkIsolation() bool { return false }

func procAttr(bool) *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

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
