package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/cli"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
)

// With no daemon answering, an operator command run in a folder holding
// .touba/ files works on them: it says so, naming the files it read (by
// absolute path), after its output, or after its refusal line, which
// still starts with the code.
func TestCLISaysWhichFilesItRead(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, env := range []string{"STATE_DIRECTORY", "RUNTIME_DIRECTORY", "TOUBA_ADMIN_SOCKET", "TOUBA_QUEUE", "TOUBA_STATE",
		"TOUBA_STATE_FILE", "TOUBA_EFFECT_JOURNAL", "TOUBA_DATABASE"} {
		t.Setenv(env, "") // restored after the test
		os.Unsetenv(env)
	}
	ctx := context.Background()
	if err := os.Mkdir(".touba", 0o700); err != nil {
		t.Fatal(err)
	}
	q, err := queue.Open(ctx, filepath.Join(".touba", cli.DefaultQueueFile), queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	st, err := state.Open(ctx, filepath.Join(".touba", cli.DefaultStateFile), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	abs := filepath.Join(dir, ".touba")
	want := "note: no daemon answers on .touba/admin.sock; read the files " + filepath.Join(abs, cli.DefaultQueueFile) +
		", " + filepath.Join(abs, cli.DefaultStateFile) + "\n"

	var stdout, stderr bytes.Buffer
	if exit := Run(ctx, []string{"queue", "ls"}, &stdout, &stderr); exit != cli.ExitOK {
		t.Fatalf("queue ls: exit %d\n%s", exit, stderr.String())
	}
	if got := stderr.String(); got != want {
		t.Fatalf("queue ls on the files: stderr %q, want %q", got, want)
	}

	stdout.Reset()
	stderr.Reset()
	exit := Run(ctx, []string{"queue", "show", "no-such-entry"}, &stdout, &stderr)
	lines := strings.SplitAfter(stderr.String(), "\n")
	if exit != cli.ExitRuntime || len(lines) < 2 || !strings.HasPrefix(lines[0], touba.ENotFound+": ") || lines[1] != want {
		t.Fatalf("queue show of an unknown entry on the files: exit %d, stderr %q; want the refusal line, then %q", exit, stderr.String(), want)
	}
}
