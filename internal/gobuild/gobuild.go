// Package gobuild builds the small programs that tests run as real child
// processes (handlers, remotes), once per test binary, into a temporary
// folder that is removed when the tests end.
package gobuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Main builds every package of progs (package path, relative to the test's
// folder, to the variable that receives the built program's path), runs
// the tests, removes the programs and exits with the tests' code. Call it
// from TestMain.
func Main(m *testing.M, progs map[string]*string) {
	os.Exit(run(m, progs))
}

func run(m *testing.M, progs map[string]*string) int {
	dir, err := os.MkdirTemp("", "touba-test-programs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	for pkg, out := range progs {
		*out = filepath.Join(dir, filepath.Base(pkg))
		if err := Build("", pkg, *out); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
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
