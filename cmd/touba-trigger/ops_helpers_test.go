package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

// opWait bounds every wait on a condition; generous, for -race and a
// loaded machine.
const opWait = 60 * time.Second

// opHandlerPath is testdata/handler, built by TestMain.
var opHandlerPath string

// TestMain builds the test handler and, at the end, removes it and the
// daemon binary testkit builds.
func TestMain(m *testing.M) {
	gobuild.Main(pgtest.M(m), map[string]*string{"./testdata/handler": &opHandlerPath})
}

// opProgram runs a charge (an external write that needs reconciling when
// its outcome is unknown) then a notify fed by the charge's output.
const opProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:ops/Orders", "source": {"kind": "webhook"},
   "steps": [
     {"id": "charge", "tool": "tool:ops/Charge", "input": {"order": {"$ref": "/event/body"}}},
     {"id": "notify", "tool": "tool:ops/Notify", "input": {"charge": {"$ref": "/steps/charge/output"}}}],
   "retry": {"max_attempts": 3, "initial_interval_ms": 50, "max_interval_ms": 200}}]}`

// opManifest's charge dies on its first call without answering (outcome
// unknown) and answers every later one.
const opManifest = `{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:ops/Charge": {"handler": {"kind": "process", "command": "{{HANDLER}}", "args": ["{{CALLS}}", "die-once", "{{MARKER}}"]},
    "grants": ["network"], "timeout_ms": 1000, "compensation": {"supported": true},
    "effect_contract": {"kind": "external_write", "retry_mode": "reconcile"}},
  "tool:ops/Notify": {"handler": {"kind": "process", "command": "{{HANDLER}}", "args": ["{{CALLS}}", "ok"]},
    "grants": ["network"], "timeout_ms": 10000,
    "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`

// opEnv is one deployment: its files in a short temporary folder (a unix
// socket path must fit in 108 bytes).
type opEnv struct {
	dir, program, manifest, queue, state, journal, socket, calls, marker string
	// db, set, is the PostgreSQL database used instead of the three files.
	db string
}

func newOpEnv(tb testing.TB, program, manifest string) *opEnv {
	tb.Helper()
	dir, err := os.MkdirTemp("", "tops")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	e := &opEnv{dir: dir, program: filepath.Join(dir, "program.air.json"), manifest: filepath.Join(dir, "touba.manifest.json"),
		queue: filepath.Join(dir, "q.sqlite"), state: filepath.Join(dir, "s.sqlite"), journal: filepath.Join(dir, "j.sqlite"),
		socket: filepath.Join(dir, "admin.sock"), calls: filepath.Join(dir, "calls.jsonl"), marker: filepath.Join(dir, "died")}
	manifest = strings.NewReplacer("{{HANDLER}}", opHandlerPath, "{{CALLS}}", e.calls, "{{MARKER}}", e.marker).Replace(manifest)
	for p, data := range map[string]string{e.program: program, e.manifest: manifest} {
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return e
}

func (e *opEnv) fileFlags(cmd string) []string {
	if e.db != "" {
		return []string{"--admin-socket", e.socket, "--database", e.db}
	}
	if cmd == "journal" {
		return []string{"--effect-journal", e.journal}
	}
	return []string{"--admin-socket", e.socket, "--queue", e.queue, "--state-file", e.state, "--effect-journal", e.journal}
}

func (e *opEnv) serveArgs(extra ...string) []string {
	args := []string{"serve", e.program, "--manifest", e.manifest, "--queue", e.queue, "--state", e.state,
		"--effect-journal", e.journal, "--admin-socket", e.socket, "--listen", "127.0.0.1:0", "--metrics-listen", "",
		"--workers", "2"}
	return append(args, extra...)
}

// start runs the server in process on e's files, with 2 workers, no
// metrics listener and what set changes.
func (e *opEnv) start(tb testing.TB, set ...func(*server.Config)) *testkit.Server {
	tb.Helper()
	cfg := server.Config{Program: e.program, Manifest: e.manifest, Queue: e.queue, State: e.state,
		Journal: e.journal, AdminSocket: e.socket, Workers: 2}
	if e.db != "" {
		cfg.Queue, cfg.State, cfg.Journal, cfg.Database, cfg.NodeID = "", "", "", e.db, "node-cli"
	}
	for _, f := range set {
		f(&cfg)
	}
	return testkit.StartServer(tb, cfg)
}

// serve starts the daemon as a child on e's files: for the tests that
// send it signals.
func (e *opEnv) serve(tb testing.TB, extra ...string) *testkit.Daemon {
	tb.Helper()
	return testkit.Start(tb, nil, e.serveArgs(extra...)...)
}

// cli runs one operator command with e's file flags and returns its exit
// code, stdout and stderr.
func (e *opEnv) cli(tb testing.TB, args ...string) (int, string, string) {
	tb.Helper()
	cmd := exec.Command(testkit.Binary(tb), append(args, e.fileFlags(args[0])...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Run()
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// cliJSON runs a command with --json, wants exit 0 and decodes stdout.
func (e *opEnv) cliJSON(tb testing.TB, v any, args ...string) {
	tb.Helper()
	code, out, errs := e.cli(tb, append(args, "--json")...)
	if code != 0 {
		tb.Fatalf("%v: exit %d\n%s%s", args, code, out, errs)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		tb.Fatalf("%v: %v\n%s", args, err, out)
	}
}

// opCall is one line of the handler's call log.
type opCall struct {
	Operation string          `json:"operation"`
	ToolRef   string          `json:"tool_ref"`
	EffectID  string          `json:"effect_id"`
	Attempt   int             `json:"attempt"`
	Input     json.RawMessage `json:"input"`
}

// handlerCalls reads the call log, optionally only calls of tool.
func (e *opEnv) handlerCalls(tb testing.TB, tool string) []opCall {
	tb.Helper()
	f, err := os.Open(e.calls)
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []opCall
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var c opCall
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			tb.Fatalf("call log line %q: %v", sc.Text(), err)
		}
		if tool == "" || c.ToolRef == tool {
			out = append(out, c)
		}
	}
	return out
}

// entryStatus reads an entry's status through the CLI.
func (e *opEnv) entryStatus(tb testing.TB, queueID string) string {
	tb.Helper()
	var d struct {
		Status string `json:"status"`
	}
	e.cliJSON(tb, &d, "queue", "show", queueID)
	return d.Status
}
