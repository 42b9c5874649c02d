// Package gobuild builds the small programs that tests run as real child
// processes (handlers, remotes, the daemon), once per test binary, into
// temporary folders that are removed when the tests end.
package gobuild

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

var (
	mu     sync.Mutex
	inMain bool     // Main is running: it removes dirs after the tests
	dirs   []string // every folder Dir made
)

// Main builds every package of progs (package path, relative to the test's
// folder, to the variable that receives the built program's path), runs
// the tests, removes the programs and every folder Dir made, and exits
// with the tests' code. Call it from TestMain.
func Main(m Runner, progs map[string]*string) {
	os.Exit(run(m, progs))
}

// Runner runs a binary's tests: a *testing.M, or one wrapped to clean up
// after them (pgtest.M stops the PostgreSQL cluster).
type Runner interface{ Run() int }

func run(m Runner, progs map[string]*string) int {
	mu.Lock()
	inMain = true
	mu.Unlock()
	defer removeDirs()
	dir, err := Dir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for pkg, out := range progs {
		*out = filepath.Join(dir, filepath.Base(pkg))
		if err := Build("", pkg, *out); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

// Dir makes a temporary folder for programs built once per test binary
// (lazily, by the first test that needs one), removed when Main's tests
// end. Without Main in TestMain nothing would remove it, so it refuses.
func Dir() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if !inMain {
		return "", errors.New("gobuild.Dir: call gobuild.Main from TestMain, which removes the folder after the tests")
	}
	dir, err := os.MkdirTemp("", "touba-test-programs-")
	if err != nil {
		return "", err
	}
	dirs = append(dirs, dir)
	return dir, nil
}

func removeDirs() {
	mu.Lock()
	defer mu.Unlock()
	for _, d := range dirs {
		os.RemoveAll(d)
	}
	dirs = nil
}

// Build runs `go build -o out pkg` in dir ("" for the current folder).
func Build(dir, pkg, out string) error {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go" // the toolchain of this project's machines
	}
	cmd := exec.Command(gobin, "build", "-o", out, pkg)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", pkg, err, b)
	}
	return nil
}
