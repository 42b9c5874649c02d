package server

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
)

// The CLI's files mode runs a compensation's handler itself, so it holds
// to SPEC §2.2 as serve does: where the host cannot isolate a process
// binding without the network grant, opening with that manifest is refused
// (NetworkIsolationUnavailable) unless allowed, and then warned; never
// silently with the host's network (the handler runners no longer warn).
func TestOpenFilesChecksIsolation(t *testing.T) {
	program, manifest, files := filesFixture(t, t.TempDir())
	old := isolationProbe
	isolationProbe = func() (string, error) { return "", errors.New("operation not permitted") }
	t.Cleanup(func() { isolationProbe = old })

	for _, allow := range []bool{false, true} {
		var logs bytes.Buffer
		f, err := OpenFiles(context.Background(), FilesConfig{Queue: files.Queue, State: files.State, Journal: files.Journal,
			Program: program, Manifest: manifest, AllowUnisolatedHandlers: allow, Log: zerolog.New(&logs), Notes: &bytes.Buffer{}})
		if !allow {
			if got := touba.ErrorCode(err); got != touba.ENetworkIsolationUnavailable || !strings.Contains(err.Error(), "tool:t/Charge") {
				t.Fatalf("without isolation: err = %v (code %q), want %s naming tool:t/Charge", err, got, touba.ENetworkIsolationUnavailable)
			}
			continue
		}
		if err != nil {
			t.Fatalf("allowed: %v", err)
		}
		f.Close()
		if !strings.Contains(logs.String(), `"level":"warn"`) || !strings.Contains(logs.String(), "tool:t/Charge") {
			t.Fatalf("allowed without a warning naming the binding: %s", logs.String())
		}
	}
}

// filesFixture writes, in dir, a program and a manifest with one process
// binding without the network grant, and creates the three files as a
// daemon would, so that OpenFiles finds them.
func filesFixture(tb testing.TB, dir string) (program, manifest string, files storeConfig) {
	tb.Helper()
	program, manifest = filepath.Join(dir, "program.air.json"), filepath.Join(dir, "touba.manifest.json")
	for p, data := range map[string]string{
		program: `{"air_version": "touba-air-v1", "triggers": [{"ref": "trigger:t/Orders", "source": {"kind": "webhook"},
		  "steps": [{"id": "charge", "tool": "tool:t/Charge", "input": {}}]}]}`,
		manifest: `{"manifest_version": "touba-manifest-v1", "bindings": {"tool:t/Charge": {
		  "handler": {"kind": "process", "command": "/bin/true"}, "grants": [], "timeout_ms": 1000,
		  "compensation": {"supported": true}, "effect_contract": {"kind": "external_write", "retry_mode": "reconcile"}}}}`,
	} {
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	files = storeConfig{Queue: filepath.Join(dir, "q.sqlite"), State: filepath.Join(dir, "s.sqlite"),
		Journal: filepath.Join(dir, "j.sqlite"), Daemon: true, Log: zerolog.Nop()}
	st, err := openStores(context.Background(), files)
	if err != nil {
		tb.Fatal(err)
	}
	if err := st.Close(); err != nil {
		tb.Fatal(err)
	}
	return program, manifest, files
}
