package isolation_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/verify"
)

// daemonDir makes a folder for one daemon's files and programs, and copies
// the daemon binary into it. A folder of its own, not t.TempDir(): that
// one's parent is private to root, and nobody must reach the files.
func daemonDir(t *testing.T) (dir, daemonBin string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "touba-isolation-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir, copyExec(t, testkit.Binary(t), filepath.Join(dir, "touba-trigger"))
}

// serveArgs are serve's arguments for the program and manifest of dir,
// with every file in dir, then extra.
func serveArgs(dir string, extra ...string) []string {
	return append([]string{"serve", filepath.Join(dir, "program.air.json"),
		"--manifest", filepath.Join(dir, "touba.manifest.json"), "--queue", filepath.Join(dir, "q.sqlite"),
		"--state", filepath.Join(dir, "s.sqlite"), "--effect-journal", filepath.Join(dir, "j.sqlite"),
		"--listen", "127.0.0.1:0", "--metrics-listen", "", "--admin-socket", filepath.Join(dir, "admin.sock")}, extra...)
}

// serveCmd is the daemon of dir, started from its folder.
func serveCmd(dir, daemonBin string, extra ...string) *exec.Cmd {
	cmd := exec.Command(daemonBin, serveArgs(dir, extra...)...)
	cmd.Dir = dir
	return cmd
}

// asNobody makes cmd run as nobody when the test runs as root, and gives
// nobody the files of dir. Root (CAP_SYS_ADMIN, CAP_SYS_PTRACE) is not what
// the shipped unit runs as (User=touba), and root reads any process.
func asNobody(t *testing.T, dir string, cmd *exec.Cmd) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	chownAll(t, dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
}

// chownAll gives nobody everything in dir.
func chownAll(t *testing.T, dir string) {
	t.Helper()
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, nobody, nobody)
	}); err != nil {
		t.Fatal(err)
	}
}

// signedProgram is a program of one trigger, iso/<name>, verified with
// the secret in secretVar, whose steps call tools in order.
func signedProgram(name string, tools ...string) string {
	var steps []string
	for i, tool := range tools {
		steps = append(steps, fmt.Sprintf(`{"id": "s%d", "tool": %q}`, i, tool))
	}
	return `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:iso/` + name + `", "source": {"kind": "webhook",
     "verify": {"scheme": "hmac-sha256", "secret": {"env": "` + secretVar + `"}}},
   "steps": [` + strings.Join(steps, ", ") + `]}]}`
}

// deliver posts one delivery of trigger iso/name signed with secret and
// checks that it was enqueued.
func deliver(t *testing.T, d *testkit.Daemon, name, eventID, secret string) {
	t.Helper()
	deliverBody(t, d, name, eventID, `{"n":1}`, secret)
}

// deliverBody is deliver with a body of the test's.
func deliverBody(t *testing.T, d *testkit.Daemon, name, eventID, text, secret string) {
	t.Helper()
	body := []byte(text)
	req, err := http.NewRequest(http.MethodPost, d.URL()+"/triggers/iso/"+name, strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Touba-Event-Id", eventID)
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
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		tb.Fatal(err)
	}
}
