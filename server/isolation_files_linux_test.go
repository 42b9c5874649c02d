//go:build linux

package server

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// hardenChildEnv names the folder of the fixture when the test binary runs
// as TestOpenFilesHardens's child.
const hardenChildEnv = "TOUBA_TEST_OPENFILES_HARDEN_DIR"

// The CLI's files mode with a manifest resolves every secret (the
// operator's environment holds the {"env": ...} ones) and starts handlers
// as its own user: it makes itself non-dumpable as the daemon does, so a
// compensation's handler cannot read /proc/<cli>/environ or its memory
// (SPEC §2.2). Non-dumpable is for the life of the process, so OpenFiles
// runs in a child of the test binary, which reports the flag.
func TestOpenFilesHardens(t *testing.T) {
	if dir := os.Getenv(hardenChildEnv); dir != "" {
		files := storeConfig{Queue: filepath.Join(dir, "q.sqlite"), State: filepath.Join(dir, "s.sqlite"),
			Journal: filepath.Join(dir, "j.sqlite")}
		isolationProbe = func() (string, error) { return "stub", nil }
		f, err := OpenFiles(context.Background(), FilesConfig{Queue: files.Queue, State: files.State, Journal: files.Journal,
			Program: filepath.Join(dir, "program.air.json"), Manifest: filepath.Join(dir, "touba.manifest.json"),
			Log: zerolog.Nop(), Notes: &bytes.Buffer{}})
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("dumpable=%d\n", d)
		return
	}
	dir := t.TempDir()
	filesFixture(t, dir)
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenFilesHardens$", "-test.count=1")
	cmd.Env = append(os.Environ(), hardenChildEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "dumpable=0") {
		t.Fatalf("OpenFiles with a manifest left the process dumpable:\n%s", out)
	}
}
