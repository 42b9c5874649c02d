package handler

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
)

// stderrLimit bounds how much of a handler's stderr is kept for the log.
const stderrLimit = 64 << 10

// child is one started handler process and the parent's ends of its pipes.
// One-shot and persistent (SPEC §4.1) runners share it.
type child struct {
	cmd    *exec.Cmd
	stdin  *os.File // write end
	stdout *os.File // read end
	stderr *os.File // read end
	exited <-chan struct{}
	reap   func() *os.ProcessState
	once   sync.Once
}

// startChild starts command in its own process group with exactly env.
// The pipes are the parent's own *os.File ends: exec then runs no copying
// goroutines, and a grandchild that keeps a pipe open cannot hold up Wait.
func startChild(command string, args []string, dir string, env []string, isolate bool) (*child, error) {
	cmd := exec.Command(command, args...)
	if cmd.Err != nil {
		return nil, cmd.Err
	}
	cmd.Dir = dir
	cmd.Env = env
	cmd, status, statusW, err := prepare(cmd, isolate)
	if err != nil {
		return nil, err
	}
	var files [6]*os.File
	closeAll := func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
		if status != nil {
			status.Close()
			statusW.Close()
		}
	}
	for k := 0; k < 6; k += 2 {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("pipe: %w", err)
		}
		files[k], files[k+1] = r, w
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = files[0], files[3], files[5]
	if err := cmd.Start(); err != nil {
		closeAll()
		return nil, err
	}
	// The child holds its own copies now.
	files[0].Close()
	files[3].Close()
	files[5].Close()
	c := &child{cmd: cmd, stdin: files[1], stdout: files[2], stderr: files[4]}
	c.exited, c.reap = watchExit(cmd)
	if status != nil {
		// Through the isolation helper: the handler itself has started
		// only once the helper says so.
		statusW.Close()
		if err := helperStarted(status); err != nil {
			c.kill()
			c.reap()
			c.close()
			return nil, err
		}
	}
	return c, nil
}

// kill sends SIGKILL to the whole process group, grandchildren included.
// A handler cannot ignore it, and SIGTERM first would only give a hung
// handler more time than its timeout allowed.
func (c *child) kill() {
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
}

// close releases the parent's pipe ends; it unblocks any pending read or
// write on them.
func (c *child) close() {
	c.once.Do(func() {
		c.stdin.Close()
		c.stdout.Close()
		c.stderr.Close()
	})
}

// tail keeps the last limit bytes written to it: the end of a handler's
// stderr is where its fatal error is.
type tail struct {
	buf   []byte
	limit int
}

func (t *tail) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.limit {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.limit:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	return string(t.buf[max(0, len(t.buf)-t.limit):])
}

// handlerEnv is the whole environment of a handler (SPEC §2.2): PATH, LANG
// and TZ when the daemon has them, and the binding's secrets; nothing else
// of the daemon's.
func handlerEnv(lookup func(string) (string, bool), secrets map[string]string) []string {
	env := []string{} // never nil: a nil Env would hand the handler the daemon's whole environment
	for _, name := range []string{"PATH", "LANG", "TZ"} {
		if v, ok := lookup(name); ok {
			env = append(env, name+"="+v)
		}
	}
	names := slices.Sorted(maps.Keys(secrets))
	for _, name := range names {
		env = append(env, name+"="+secrets[name])
	}
	return env
}

// redactor replaces secret values in text meant for the log.
func redactor(secrets map[string]string) func(string) string {
	values := make([]string, 0, len(secrets))
	for _, v := range secrets {
		if v != "" {
			values = append(values, v)
		}
	}
	// Longest first, so a secret that contains another is hidden whole.
	sort.Slice(values, func(i, j int) bool { return len(values[i]) > len(values[j]) })
	var pairs []string
	for _, v := range values {
		pairs = append(pairs, v, "[redacted]")
	}
	if len(pairs) == 0 {
		return func(s string) string { return s }
	}
	r := strings.NewReplacer(pairs...)
	return r.Replace
}
