//go:build linux

package admin_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// peerChildEnv makes the test binary a client of the admin socket named
// by its value: it prints the answer's status and body, and exits.
const peerChildEnv = "TOUBA_ADMIN_PEER_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(peerChildEnv); path != "" {
		os.Exit(peerChild(path))
	}
	os.Exit(m.Run())
}

func peerChild(path string) int {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}}}
	res, err := c.Get("http://admin/v1/entries")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	fmt.Println(res.StatusCode, strings.TrimSpace(string(b)))
	return 0
}

// A process of another user is refused by its kernel-checked uid, even
// when the socket's file mode lets it connect (widened by hand here): the
// file mode is not the only guard. Needs root, to run the client as
// nobody.
func TestAdminSocketRefusesOtherUsers(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	f := mustFiles(t)
	srv, _ := serve(t, f.svc)
	dir := filepath.Dir(filepath.Dir(srv.Path))
	for _, p := range []string{dir, filepath.Dir(srv.Path)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(srv.Path, 0o666); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "client.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(cred *syscall.Credential) string {
		t.Helper()
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), peerChildEnv+"="+srv.Path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("client: %v: %s", err, out.String())
		}
		return out.String()
	}
	if got := run(&syscall.Credential{Uid: 65534, Gid: 65534}); !strings.HasPrefix(got, "403 ") || !strings.Contains(got, `"AdminForbidden"`) {
		t.Fatalf("client as nobody got %q, want 403 AdminForbidden", got)
	}
	if got := run(nil); !strings.HasPrefix(got, "200 ") {
		t.Fatalf("client as root got %q, want 200", got)
	}
}
