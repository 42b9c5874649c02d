// Package upgrade_test runs the previous release's binary, built from its
// commit, beside this one on the same database and the same files (SPEC
// §8 "Rolling upgrades"): release N keeps serving while release N+1
// migrates the schema under load, loses and parks nothing, and starts
// again on N+1's schema; N+1 opens N's SQLite files and N opens them back.
package upgrade_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// previousRelease is the commit of the last release that landed before
// this one (round 6: PostgreSQL speed, durable steps), whose schema the
// migrations of this release start from. Moving to a new release, set it
// to the commit the last release was cut from.
const previousRelease = "ce78284876eed9fa272f95d9ff5e69623e40cc52"

func TestMain(m *testing.M) { gobuild.Main(pgtest.M(m), nil) }

var (
	prevOnce sync.Once
	prevBin  string
	prevErr  error
	prevSkip string
)

// previousBinary builds the previous release's touba-trigger (once) from
// its commit, taken out of this repository's history with git archive
// (nothing in the work tree changes). A clone without that commit (a
// shallow one) skips the test, saying so.
func previousBinary(t *testing.T) string {
	t.Helper()
	prevOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		if _, err := exec.LookPath("git"); err != nil {
			prevSkip = "git is not installed: cannot take the previous release out of the history"
			return
		}
		if out, err := exec.Command("git", "-C", root, "cat-file", "-e", previousRelease+"^{commit}").CombinedOutput(); err != nil {
			prevSkip = fmt.Sprintf("commit %s of the previous release is not in this clone (a shallow clone?): %s", previousRelease[:12], out)
			return
		}
		dir, err := gobuild.Dir()
		if err != nil {
			prevErr = err
			return
		}
		src := filepath.Join(dir, "src")
		if err := os.MkdirAll(src, 0o755); err != nil {
			prevErr = err
			return
		}
		archive := exec.Command("git", "-C", root, "archive", previousRelease)
		untar := exec.Command("tar", "-x", "-C", src)
		// One buffer each: the two write their stderr at once.
		var errb, untarErr bytes.Buffer
		archive.Stderr, untar.Stderr = &errb, &untarErr
		if untar.Stdin, err = archive.StdoutPipe(); err != nil {
			prevErr = err
			return
		}
		if err := untar.Start(); err != nil {
			prevErr = err
			return
		}
		if err := archive.Run(); err != nil {
			prevErr = fmt.Errorf("git archive %s: %v: %s", previousRelease[:12], err, errb.String())
			return
		}
		if err := untar.Wait(); err != nil {
			prevErr = fmt.Errorf("untar %s: %v: %s", previousRelease[:12], err, untarErr.String())
			return
		}
		prevBin = filepath.Join(dir, "touba-trigger-previous")
		prevErr = gobuild.Build(src, "./cmd/touba-trigger", prevBin)
	})
	if prevSkip != "" {
		t.Skip(prevSkip)
	}
	if prevErr != nil {
		t.Fatalf("build the previous release: %v", prevErr)
	}
	return prevBin
}
