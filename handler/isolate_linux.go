//go:build linux

package handler

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"github.com/touba/touba-trigger/internal/nshelper"
)

// A daemon that is not root starts a handler without the network grant
// through the isolation helper, a mode of its own binary (package nshelper
// says why and how): the helper is dumpable after its execve, so it can
// write the uid and gid maps of the handler it starts in a new user and
// network namespace. It reports the handler's start on a pipe, so a start
// that fails is not_applied, as a failed direct start is.

// helperCommand returns the command that starts cmd through the helper,
// and the read end of its status pipe. cmd must not be started; the
// helper gets its directory and environment.
func helperCommand(cmd *exec.Cmd) (*exec.Cmd, *os.File, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("pipe: %w", err)
	}
	h := &exec.Cmd{Path: "/proc/self/exe", Args: append([]string{nshelper.Name, nshelper.Arg, cmd.Path}, cmd.Args...),
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
