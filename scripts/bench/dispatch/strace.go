package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// fsyncCounter counts this process's fsync and fdatasync calls with strace
// attached to it over the drain only (the entries are queued before): the
// fsyncs per effect measured at the system call, checkpoints included,
// rather than inferred from the commits.
type fsyncCounter struct {
	cmd *exec.Cmd
	out string
}

func startFsyncCounter(dir string) (*fsyncCounter, error) {
	c := &fsyncCounter{out: dir + "/strace.out"}
	c.cmd = exec.Command("strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", c.out, "-p", strconv.Itoa(os.Getpid()))
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	// Attached once /proc says we have a tracer.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile("/proc/self/status"); err == nil && !strings.Contains(string(b), "TracerPid:\t0\n") {
			return c, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.cmd.Process.Kill()
	return nil, fmt.Errorf("strace did not attach")
}

// stop detaches strace and returns the fsync and fdatasync calls it saw.
func (c *fsyncCounter) stop() (int, error) {
	c.cmd.Process.Signal(syscall.SIGINT)
	c.cmd.Wait()
	f, err := os.Open(c.out)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 5 && (fs[len(fs)-1] == "fsync" || fs[len(fs)-1] == "fdatasync") {
			// % time, seconds, usecs/call, calls, [errors,] syscall
			if v, err := strconv.Atoi(fs[3]); err == nil {
				n += v
			}
		}
	}
	return n, sc.Err()
}
