package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/cli"
	"github.com/touba/touba-trigger/sqlite/journal"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
)

const (
	refusalProgram = `{"air_version": "touba-air-v1", "triggers": [{"ref": "trigger:t/a", "source": {"kind": "webhook"},
  "steps": [{"id": "s", "tool": "tool:t/W"}]}]}`
	refusalManifest = `{"manifest_version": "touba-manifest-v1", "bindings": {"tool:t/W": {
  "handler": {"kind": "accounting_stub"}, "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`
)

// SPEC §3: every refusal printed by serve or the CLI starts with its public
// code, so scripts can match on it, and exits with the code's exit status.
// Each row is one refusal path of cmd/touba-trigger, run in process.
func TestEveryRefusalStartsWithItsCode(t *testing.T) {
	dir := t.TempDir()
	file := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	prog, man := file("program.json", refusalProgram), file("manifest.json", refusalManifest)
	badProg := file("bad.json", `{"air_version": "touba-air-v1", "triggers": [{"ref": "nope"}]}`)
	secretProg := file("secret.json", strings.Replace(refusalProgram, `"kind": "webhook"`,
		`"kind": "webhook", "verify": {"scheme": "hmac-sha256", "secret": {"env": "TOUBA_REFUSAL_UNSET_SECRET"}}`, 1))
	serve := func(name string, extra ...string) []string {
		d := filepath.Join(dir, name)
		return append([]string{"serve", prog, "--manifest", man, "--queue", filepath.Join(d, "q"), "--state", filepath.Join(d, "s"),
			"--effect-journal", filepath.Join(d, "j"), "--listen", "127.0.0.1:0", "--metrics-listen", "",
			"--admin-socket", filepath.Join(d, "admin.sock")}, extra...)
	}

	// A journal whose lock this test holds: a live holder.
	held := filepath.Join(dir, "held", "j")
	lock, err := journal.AcquireLock(held, journal.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	// A journal whose lock record was left by a process that is gone.
	stale := filepath.Join(dir, "stale", "j")
	if err := os.MkdirAll(filepath.Dir(stale), 0o700); err != nil {
		t.Fatal(err)
	}
	file("stale/j.lock", `{"pid": 999999999, "host": "elsewhere", "boot_id": "b", "started_at": "2026-01-01T00:00:00Z"}`)
	// Offline files for the CLI, with nothing in them to replay.
	offline := filepath.Join(dir, "offline")
	if err := os.MkdirAll(offline, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	q, err := queue.Open(ctx, filepath.Join(offline, "q"), queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	st, err := state.Open(ctx, filepath.Join(offline, "s"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	onFiles := func(args ...string) []string {
		return append(args, "--admin-socket", filepath.Join(offline, "none.sock"), "--queue", filepath.Join(offline, "q"),
			"--state-file", filepath.Join(offline, "s"), "--effect-journal", filepath.Join(offline, "j"))
	}
	// A port already taken.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	for _, tt := range []struct {
		name string
		args []string
		env  string // NAME=value set for the row
		code string
		exit int
		want string // in the refusal line
	}{
		{"no command", nil, "", touba.EUsage, cli.ExitUsage, "no command given"},
		{"unknown command", []string{"frobnicate"}, "", touba.EUsage, cli.ExitUsage, `unknown command "frobnicate"`},
		{"unknown flag", []string{"serve", "--no-such-flag"}, "", touba.EUsage, cli.ExitUsage, "no-such-flag"},
		{"serve without program", []string{"serve"}, "", touba.EUsage, cli.ExitUsage, "one PROGRAM"},
		{"serve bad workers", serve("w", "--workers", "-1"), "", touba.EUsage, cli.ExitUsage, "--workers"},
		{"serve bad log level", serve("l", "--log-level", "loud"), "", touba.EUsage, cli.ExitUsage, "--log-level"},
		{"flag from the environment", serve("e"), "TOUBA_WORKERS=many", touba.EUsage, cli.ExitUsage, "TOUBA_WORKERS"},
		{"check without manifest", []string{"check", prog}, "", touba.EUsage, cli.ExitUsage, "--manifest is required"},
		{"check bad program", []string{"check", badProg, "--manifest", man}, "", touba.ECONFIG, cli.ExitUsage, badProg},
		{"check unresolved secret", []string{"check", secretProg, "--manifest", man}, "", touba.ECONFIG, cli.ExitUsage, "TOUBA_REFUSAL_UNSET_SECRET"},
		{"serve without journal", append(serve("nj"), "--effect-journal", ""), "", touba.EEffectJournalRequired, cli.ExitUsage, ""},
		{"serve journal locked", append(serve("h"), "--effect-journal", held), "", touba.EJournalLocked, cli.ExitLocked, "is held by pid"},
		{"serve journal lock stale", append(serve("st"), "--effect-journal", stale), "", touba.EJournalLockStale, cli.ExitLocked, "pid 999999999"},
		{"serve port taken", append(serve("p"), "--listen", ln.Addr().String()), "", touba.EINTERNAL, cli.ExitRuntime, ln.Addr().String()},
		{"journal unlock without journal", []string{"journal", "unlock", "--effect-journal", ""}, "", touba.EUsage, cli.ExitUsage, "--effect-journal"},
		{"journal unlock live holder", []string{"journal", "unlock", "--effect-journal", held}, "", touba.EJournalLocked, cli.ExitLocked, ""},
		{"queue unknown verb", []string{"queue", "frob"}, "", touba.EUsage, cli.ExitUsage, "queue frob"},
		{"queue show without id", onFiles("queue", "show"), "", touba.EUsage, cli.ExitUsage, "QUEUE_ID"},
		{"no daemon, no files", []string{"queue", "ls", "--admin-socket", filepath.Join(dir, "none.sock"),
			"--queue", filepath.Join(dir, "absent-q"), "--state", filepath.Join(dir, "absent-s")}, "", touba.EDaemonUnavailable, cli.ExitRuntime, "no daemon answers"},
		{"nothing replayed", onFiles("queue", "replay", "no-such-entry"), "", touba.ENothingReplayed, cli.ExitRuntime, ""},
		{"effects resolve both verdicts", onFiles("effects", "resolve", "s", "e", "--applied", "--not-applied"), "", touba.EUsage, cli.ExitUsage, "exactly one"},
		{"effects resolve unreadable result", onFiles("effects", "resolve", "s", "e", "--applied", "--receipt-ref", "r",
			"--result", filepath.Join(dir, "absent.json")), "", touba.EUsage, cli.ExitUsage, "--result"},
		{"effects resolve without a journal", onFiles("effects", "resolve", "s", "e", "--not-applied"), "", touba.EEffectJournalRequired, cli.ExitUsage, ""},
		{"deliveries show without id", onFiles("deliveries", "show"), "", touba.EUsage, cli.ExitUsage, "DELIVERY_ID"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if name, value, ok := strings.Cut(tt.env, "="); ok {
				t.Setenv(name, value)
			}
			var stdout, stderr bytes.Buffer
			exit := Run(ctx, tt.args, &stdout, &stderr)
			line, _, _ := strings.Cut(stderr.String(), "\n")
			if !strings.HasPrefix(line, tt.code+": ") || !strings.Contains(line, tt.want) {
				t.Errorf("refusal line %q, want it to start with %q and hold %q\nstderr:\n%s", line, tt.code+": ", tt.want, stderr.String())
			}
			if strings.Contains(line, "code=") {
				t.Errorf("refusal line %q shows an error's Go rendering", line)
			}
			if exit != tt.exit {
				t.Errorf("exit %d, want %d", exit, tt.exit)
			}
		})
	}
}

// A usage refusal is followed by the usage, after the code line.
func TestUsageFollowsTheRefusal(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if exit := Run(context.Background(), []string{"check", "--bogus"}, &stdout, &stderr); exit != cli.ExitUsage {
		t.Fatalf("exit %d", exit)
	}
	want := touba.EUsage + ": flag provided but not defined: -bogus\n"
	if got := stderr.String(); !strings.HasPrefix(got, want) || !strings.Contains(got, "-manifest") {
		t.Fatalf("stderr %q, want %q then the flags", got, want)
	}
	stderr.Reset()
	if exit := Run(context.Background(), []string{"check", "-h"}, &stdout, &stderr); exit != cli.ExitOK || !strings.Contains(stderr.String(), "-manifest") {
		t.Fatalf("-h: exit %d, %q", exit, stderr.String())
	}
	fmt.Fprint(&stdout) // stdout carries no refusal
}
