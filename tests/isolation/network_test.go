package isolation_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
)

// dialReport is testdata/dial's Report.
type dialReport struct {
	Connected     bool
	DialErr       string
	UID, GID      int
	ParentCmdline string
}

// listen opens a TCP listener on the host's 127.0.0.1 that accepts and
// closes connections until the test ends.
func listen(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// dialManifest binds tool:iso/Closed (no grants) and tool:iso/Open (the
// network grant) to the dial handler, each writing its report in dir.
func dialManifest(dir, addr string) string {
	return fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:iso/Closed": {"handler": {"kind": "process", "command": %q, "args": [%q, %q]},
    "grants": [], "timeout_ms": 30000, "effect_contract": {"kind": "none"}},
  "tool:iso/Open": {"handler": {"kind": "process", "command": %[1]q, "args": [%[4]q, %[3]q]},
    "grants": ["network"], "timeout_ms": 30000, "effect_contract": {"kind": "none"}}}}`,
		filepath.Join(dir, "dial"), filepath.Join(dir, "closed.json"), addr, filepath.Join(dir, "open.json"))
}

// The daemon runs as the shipped unit runs it, not root (nobody here): a
// handler without the network grant has no network at all, not even the
// host's loopback; one with the grant reaches the test's listener. Also
// under NoNewPrivileges and an empty capability bounding set (the unit's
// NoNewPrivileges=yes and CapabilityBoundingSet=), through setpriv.
func TestNetworkIsolationAsTheDaemonsUser(t *testing.T) {
	for _, how := range []string{"credential", "setpriv"} {
		t.Run(how, func(t *testing.T) {
			addr := listen(t)
			dir, daemonBin := daemonDir(t)
			copyExec(t, dialBin, filepath.Join(dir, "dial"))
			writeFile(t, filepath.Join(dir, "program.air.json"), signedProgram("Dial", "tool:iso/Closed", "tool:iso/Open"))
			writeFile(t, filepath.Join(dir, "touba.manifest.json"), dialManifest(dir, addr))
			cmd := serveCmd(dir, daemonBin)
			switch how {
			case "credential":
				asNobody(t, dir, cmd)
			case "setpriv":
				cmd = setprivCmd(t, dir, daemonBin)
			}
			secret := "isolation-" + fmt.Sprint(time.Now().UnixNano())
			d := testkit.StartCmd(t, cmd, []string{secretVar + "=" + secret})
			deliver(t, d, "Dial", "ev-1", secret)
			d.WaitLog(`"message":"run done"`, 30*time.Second)
			if line := warning(d.Log(), "isolat"); line != "" {
				t.Errorf("the daemon warned about isolation: %s", line)
			}
			closed, open := readDial(t, filepath.Join(dir, "closed.json")), readDial(t, filepath.Join(dir, "open.json"))
			if closed.Connected {
				t.Errorf("the handler without the network grant connected to %s on the host's loopback (as uid %d, parent %q)",
					addr, closed.UID, closed.ParentCmdline)
			}
			if !open.Connected {
				t.Errorf("the handler with the network grant could not connect to %s: %s", addr, open.DialErr)
			}
			if want := os.Geteuid(); want == 0 && (closed.UID != nobody || open.UID != nobody) {
				t.Errorf("handlers ran as uid %d and %d, want nobody", closed.UID, open.UID)
			}
			t.Logf("without the grant: %s (parent %q); with it: connected", closed.DialErr, closed.ParentCmdline)
		})
	}
}

func readDial(t *testing.T, path string) dialReport {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no report from the handler: %v", err)
	}
	var r dialReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("report %s: %v", b, err)
	}
	return r
}

// warning returns the first warn line of log whose message holds substr.
func warning(log, substr string) string {
	for _, line := range strings.Split(log, "\n") {
		var m struct{ Level, Message string }
		if json.Unmarshal([]byte(line), &m) == nil && m.Level == "warn" && strings.Contains(m.Message, substr) {
			return line
		}
	}
	return ""
}

// setprivCmd is the daemon of dir as the shipped unit runs it (its flags), through
// setpriv: no new privileges, an empty capability bounding set, and as
// nobody (owning dir's files) when the test runs as root. It skips the
// test without setpriv.
func setprivCmd(t *testing.T, dir, daemonBin string) *exec.Cmd {
	t.Helper()
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv (util-linux) on this host")
	}
	args := []string{"--no-new-privs", "--bounding-set=-all", "--inh-caps=-all"}
	if os.Geteuid() == 0 {
		chownAll(t, dir)
		args = append(args, fmt.Sprintf("--reuid=%d", nobody), fmt.Sprintf("--regid=%d", nobody), "--clear-groups")
	}
	// --take-over-stale-lock as the unit passes it: a restart after a
	// crash takes over the lock record the crash left.
	cmd := exec.Command(setpriv, append(append(args, "--", daemonBin), serveArgs(dir, "--take-over-stale-lock")...)...)
	cmd.Dir = dir
	return cmd
}
