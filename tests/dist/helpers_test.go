package dist_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
)

// root is the repository's root folder.
func root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// need skips the test when a program is missing, naming the Debian package
// that has it.
func need(t *testing.T, prog, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(prog)
	if err != nil {
		t.Skipf("%s is not installed (apt-get install %s; .ci/run does)", prog, pkg)
	}
	return p
}

// heavy skips a test that builds release binaries or images (minutes of
// cgo compiling, per architecture) unless TOUBA_DIST_BUILD=1: .ci/run sets
// it for its own run of this package, with a longer -timeout than go
// test's default, so the README's test command stays quick.
func heavy(t *testing.T) {
	t.Helper()
	if os.Getenv("TOUBA_DIST_BUILD") != "1" {
		t.Skip("builds release binaries or an image: set TOUBA_DIST_BUILD=1 (.ci/run does, in its dist block)")
	}
}

// quickstart copies the quickstart example into a new folder and returns
// the paths of its program and manifest.
func quickstart(t *testing.T) (dir, program, manifest string) {
	t.Helper()
	dir = t.TempDir()
	for _, f := range []string{"program.air.json", "touba.manifest.json", "dev-webhook-secret"} {
		b, err := os.ReadFile(filepath.Join(root(), "examples", "quickstart", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir, filepath.Join(dir, "program.air.json"), filepath.Join(dir, "touba.manifest.json")
}

// metricsAddr reads the metrics listener's address from the daemon's log.
func metricsAddr(t *testing.T, d *testkit.Daemon) string {
	t.Helper()
	d.WaitLog(`"metrics listening"`, 30*time.Second)
	for _, line := range strings.Split(d.Log(), "\n") {
		var m struct {
			Message, Addr string
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Message == "metrics listening" {
			return m.Addr
		}
	}
	t.Fatal("no metrics address in the log")
	return ""
}

// run runs a command and fails the test, with its output, if it fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
