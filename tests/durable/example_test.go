package durable_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/internal/testkit"
)

// TestExampleChecks: the example as shipped (24 h timeout, 3-day sleeps,
// the 03:00 Paris schedule) passes `check`, which names its next tick.
func TestExampleChecks(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "..", "examples", "durable")
	out, err := exec.Command(testkit.Binary(t), "check", filepath.Join(dir, "program.air.json"),
		"--manifest", filepath.Join(dir, "touba.manifest.json")).CombinedOutput()
	if err != nil {
		t.Fatalf("check examples/durable: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "next tick:") {
		t.Fatalf("check does not print the nightly schedule's next tick:\n%s", out)
	}
}
