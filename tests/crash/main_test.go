// Package crash_test kills the real touba-trigger binary with SIGKILL at
// each named crash point (TOUBA_CRASHPOINT) and while a handler is mid-call,
// restarts it on the same files, and checks the promises of SPEC §3.2 and
// §5: no acknowledged delivery is lost or left pending, an effect applied
// is never applied again, and an effect whose outcome was lost is retried
// only where the remote deduplicates, else parked for an operator.
//
// The handler is a real process (testdata/remote, built once by TestMain)
// whose "remote side" is a file: one line per request that reached it.
package crash_test

import (
	"fmt"
	"testing"

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// remoteBin is the handler program of testdata/remote, built by TestMain.
var remoteBin string

func TestMain(m *testing.M) {
	gobuild.Main(pgtest.M(m), map[string]*string{"./testdata/remote": &remoteBin})
}

// The program has two external-write steps on the same binding: the
// second takes the first one's receipt through $ref, so a result restored
// from the journal after a crash is seen to reach the next step.
const program = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:crash/Orders", "source": {"kind": "webhook"},
   "steps": [
     {"id": "write", "tool": "tool:crash/Write", "input": {"order": {"$ref": "/event/body"}}},
     {"id": "confirm", "tool": "tool:crash/Write",
      "input": {"order": {"$ref": "/event/body"}, "prev": {"$ref": "/steps/write/output/receipt"}}}],
   "retry": {"max_attempts": 3, "initial_interval_ms": 50, "max_interval_ms": 200}}]}`

// manifestFor binds tool:crash/Write to the remote handler with retryMode,
// started per call (oneShot) or as one persistent process (SPEC §4.1).
// The binding has no network grant: the remote is a file.
func manifestFor(bin, remote, retryMode, kind string) string {
	persistent := ""
	if kind == persistentKind {
		persistent = `, "persistent": {"max_in_flight": 8, "max_calls": 1000, "idle_timeout_ms": 60000}`
	}
	return fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:crash/Write": {"handler": {"kind": "process", "command": %q, "args": [%q], "cwd": "."%s},
    "grants": [], "timeout_ms": 30000,
    "effect_contract": {"kind": "external_write", "retry_mode": %q}}}}`, bin, remote, persistent, retryMode)
}

// How the handler process runs: one process per call, or one persistent
// process serving many calls.
const (
	oneShotKind    = "one-shot"
	persistentKind = "persistent"
)

// handlerKinds are both ways a process handler runs.
var handlerKinds = []string{oneShotKind, persistentKind}

// The steps of program, and the effect id of a step of an entry.
const (
	stepWrite   = "write"
	stepConfirm = "confirm"
)

func effectID(queueID, step string) string { return queueID + ":" + step }

// retryModes are the three retry modes of SPEC §5.
var retryModes = []string{"idempotency_key", "reconcile", "none"}
