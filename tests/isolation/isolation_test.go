// Package isolation_test runs the real touba-trigger binary with a process
// handler that tries to read the daemon's secrets where SPEC §2.2 says it
// cannot: /proc/<daemon pid>/environ and the daemon's memory. The daemon
// and the handler run as one user, as they do by default; when the tests
// run as root (CI), both run as nobody, since root may read any process.
package isolation_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/testkit"
)

// snoopBin and dialBin are the handlers of testdata/snoop and
// testdata/dial, built by TestMain.
var snoopBin, dialBin string

func TestMain(m *testing.M) {
	gobuild.Main(m, map[string]*string{"./testdata/snoop": &snoopBin, "./testdata/dial": &dialBin})
}

// nobody is the user the test runs the daemon as when it runs as root.
const nobody = 65534

// secretVar holds the trigger's signing secret in the daemon's environment.
const secretVar = "TOUBA_ISOLATION_SIGNING_SECRET"

// report is testdata/snoop's Report.
type report struct {
	UID, PPID       int
	ParentCmdline   string
	Helper          string
	HelperHasVar    bool
	EnvironErr      string
	EnvironBytes    int
	EnvironHasVar   bool
	MemErr          string
	OwnEnvHasSecret bool
}

func TestHandlerCannotReadTheDaemonsSecrets(t *testing.T) {
	for _, grants := range []string{`["network"]`, `[]`} {
		t.Run("grants "+grants, func(t *testing.T) {
			r := snoop(t, grants)
			if !strings.Contains(r.ParentCmdline, "touba-trigger serve") {
				t.Fatalf("the handler's parent %d is %q, not the daemon", r.PPID, r.ParentCmdline)
			}
			if r.OwnEnvHasSecret {
				t.Error("the trigger's secret is in the handler's own environment")
			}
			if r.HelperHasVar {
				t.Errorf("the isolation helper %q has the daemon's secret variable in its environment", r.Helper)
			}
			if r.EnvironErr == "" || r.EnvironHasVar || r.EnvironBytes > 0 {
				t.Errorf("handler (uid %d) read %d bytes of /proc/%d/environ (secret variable there: %v, error %q)",
					r.UID, r.EnvironBytes, r.PPID, r.EnvironHasVar, r.EnvironErr)
			}
			if r.MemErr == "" {
				t.Errorf("handler (uid %d) opened /proc/%d/mem", r.UID, r.PPID)
			}
		})
	}
}

// snoop runs the daemon with the snoop handler bound under grants, sends
// one signed delivery, and returns what the handler could read.
func snoop(t *testing.T, grants string) report {
	t.Helper()
	dir, daemonBin := daemonDir(t)
	handlerBin := copyExec(t, snoopBin, filepath.Join(dir, "snoop"))
	reportFile := filepath.Join(dir, "report.json")
	manifest := fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:iso/Snoop": {"handler": {"kind": "process", "command": %q, "args": [%q, %q]},
    "grants": %s, "timeout_ms": 30000, "effect_contract": {"kind": "none"}}}}`,
		handlerBin, reportFile, secretVar, grants)
	writeFile(t, filepath.Join(dir, "program.air.json"), signedProgram("Snoop", "tool:iso/Snoop"))
	writeFile(t, filepath.Join(dir, "touba.manifest.json"), manifest)

	cmd := serveCmd(dir, daemonBin)
	asNobody(t, dir, cmd)
	secret := "isolation-" + fmt.Sprint(time.Now().UnixNano())
	d := testkit.StartCmd(t, cmd, []string{secretVar + "=" + secret})
	deliver(t, d, "Snoop", "ev-1", secret)
	d.WaitLog(`"message":"run done"`, 30*time.Second)
	b, err := os.ReadFile(reportFile)
	if err != nil {
		t.Fatalf("no report from the handler: %v\n%s", err, d.Log())
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("report %s: %v", b, err)
	}
	if os.Geteuid() == 0 && r.UID != nobody {
		t.Fatalf("handler ran as uid %d, want nobody", r.UID)
	}
	return r
}
