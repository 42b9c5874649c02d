// Package isolation_test runs the real touba-trigger binary with a process
// handler that tries to read the daemon's secrets where SPEC §2.2 says it
// cannot: /proc/<daemon pid>/environ and the daemon's memory. The daemon
// and the handler run as one user, as they do by default; when the tests
// run as root (CI), both run as nobody, since root may read any process.
package isolation_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/verify"
)

// snoopBin is the handler of testdata/snoop, built by TestMain.
var snoopBin string

func TestMain(m *testing.M) {
	gobuild.Main(m, map[string]*string{"./testdata/snoop": &snoopBin})
}

// nobody is the user the test runs the daemon as when it runs as root.
const nobody = 65534

// secretVar holds the trigger's signing secret in the daemon's environment.
const secretVar = "TOUBA_ISOLATION_SIGNING_SECRET"

// report is testdata/snoop's Report.
type report struct {
	UID, PPID       int
	ParentCmdline   string
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
	asRoot := os.Geteuid() == 0
	// A folder of its own, not t.TempDir(): that one's parent is private
	// to root, and nobody must reach the files.
	dir, err := os.MkdirTemp("", "touba-isolation-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	daemonBin := copyExec(t, testkit.Binary(t), filepath.Join(dir, "touba-trigger"))
	handlerBin := copyExec(t, snoopBin, filepath.Join(dir, "snoop"))
	reportFile := filepath.Join(dir, "report.json")
	program := `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:iso/Snoop", "source": {"kind": "webhook",
     "verify": {"scheme": "hmac-sha256", "secret": {"env": "` + secretVar + `"}}},
   "steps": [{"id": "snoop", "tool": "tool:iso/Snoop"}]}]}`
	manifest := fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:iso/Snoop": {"handler": {"kind": "process", "command": %q, "args": [%q, %q]},
    "grants": %s, "timeout_ms": 30000, "effect_contract": {"kind": "none"}}}}`,
		handlerBin, reportFile, secretVar, grants)
	writeFile(t, filepath.Join(dir, "program.air.json"), program)
	writeFile(t, filepath.Join(dir, "touba.manifest.json"), manifest)

	cmd := exec.Command(daemonBin, "serve", filepath.Join(dir, "program.air.json"),
		"--manifest", filepath.Join(dir, "touba.manifest.json"), "--queue", filepath.Join(dir, "q.sqlite"),
		"--state", filepath.Join(dir, "s.sqlite"), "--effect-journal", filepath.Join(dir, "j.sqlite"),
		"--listen", "127.0.0.1:0", "--metrics-listen", "", "--admin-socket", filepath.Join(dir, "admin.sock"))
	cmd.Dir = dir
	if asRoot {
		// Root (CAP_SYS_PTRACE) reads any process's environ: the promise is
		// about a handler of the daemon's own user, so both run as nobody.
		if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Chown(p, nobody, nobody)
		}); err != nil {
			t.Fatal(err)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	}
	secret := "isolation-" + fmt.Sprint(time.Now().UnixNano())
	d := testkit.StartCmd(t, cmd, []string{secretVar + "=" + secret})

	body := []byte(`{"n":1}`)
	req, err := http.NewRequest(http.MethodPost, d.URL()+"/triggers/iso/Snoop", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Touba-Event-Id", "ev-1")
	req.Header.Set("X-Signature", verify.Sign([]byte(secret), body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("delivery answered %d %s\n%s", resp.StatusCode, answer, d.Log())
	}
	d.WaitLog(`"message":"run done"`, 30*time.Second)
	b, err := os.ReadFile(reportFile)
	if err != nil {
		t.Fatalf("no report from the handler: %v\n%s", err, d.Log())
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("report %s: %v", b, err)
	}
	if asRoot && r.UID != nobody {
		t.Fatalf("handler ran as uid %d, want nobody", r.UID)
	}
	return r
}

// copyExec copies the program at src to dst, executable by anyone.
func copyExec(tb testing.TB, src, dst string) string {
	tb.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		tb.Fatal(err)
	}
	return dst
}

func writeFile(tb testing.TB, path, data string) {
	tb.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		tb.Fatal(err)
	}
}
