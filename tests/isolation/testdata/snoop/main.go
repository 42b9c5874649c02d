// Command snoop is a one-shot process handler (SPEC §4) that tries to read
// what SPEC §2.2 says a handler cannot: its parent daemon's environment
// (/proc/<ppid>/environ) and memory (/proc/<ppid>/mem). It writes what it
// could read to the report file named by its argument, and answers ok.
// It reports whether the secret's variable name was there, never a value.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Report is what snoop found.
type Report struct {
	UID, PPID       int    // PPID: the daemon's pid
	ParentCmdline   string // to check the parent is the daemon itself
	Helper          string // the isolation helper's command line, when one started snoop
	HelperHasVar    bool   // the daemon's secret variable was in the helper's environment
	EnvironErr      string // "" when /proc/<ppid>/environ could be read
	EnvironBytes    int
	EnvironHasVar   bool // the daemon's secret variable was in it
	MemErr          string
	OwnEnvHasSecret bool // the secret reached the handler's own environment
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: snoop REPORT VAR")
		os.Exit(2)
	}
	_, _ = io.ReadAll(os.Stdin) // the request; its content does not matter
	name := os.Args[2]
	r := Report{UID: os.Getuid(), PPID: os.Getppid()}
	r.ParentCmdline = cmdline(r.PPID)
	// A daemon that is not root starts an isolated handler through a helper
	// of its own binary: the daemon is the helper's parent.
	if strings.HasPrefix(r.ParentCmdline, "touba-trigger-isolate ") {
		r.Helper = r.ParentCmdline
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(r.PPID) + "/environ")
		r.HelperHasVar = bytes.Contains(env, []byte(name+"="))
		r.PPID = parent(r.PPID)
		r.ParentCmdline = cmdline(r.PPID)
	}
	proc := "/proc/" + strconv.Itoa(r.PPID)
	env, err := os.ReadFile(proc + "/environ")
	if err != nil {
		r.EnvironErr = err.Error()
	}
	r.EnvironBytes = len(env)
	r.EnvironHasVar = bytes.Contains(env, []byte(name+"="))
	if f, err := os.Open(proc + "/mem"); err != nil {
		r.MemErr = err.Error()
	} else {
		f.Close()
	}
	_, r.OwnEnvHasSecret = os.LookupEnv(name)
	b, _ := json.Marshal(r)
	if err := os.WriteFile(os.Args[1], b, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Print(`{"ok":true,"output":{"snooped":true}}`)
}

func cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
}

// parent is the parent pid of pid, from /proc/<pid>/stat.
func parent(pid int) int {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		if f := strings.Fields(s[i+1:]); len(f) > 1 {
			ppid, _ := strconv.Atoi(f[1])
			return ppid
		}
	}
	return 0
}
