package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PgBouncerBin is where Debian's pgbouncer package puts the pooler.
var PgBouncerBin = "/usr/sbin/pgbouncer"

// PgBouncer starts a PgBouncer in transaction-pooling mode, with its
// defaults otherwise (ignore_startup_parameters empty: it refuses every
// startup parameter it does not track), in front of the cluster of dsn
// (one of c's databases), and returns dsn rewritten to go through it. It
// skips t, saying why, when pgbouncer is not installed; it stops when t
// ends.
func (c *Cluster) PgBouncer(t testing.TB, dsn string) string {
	t.Helper()
	bin, err := exec.LookPath(PgBouncerBin)
	if err != nil {
		if bin, err = exec.LookPath("pgbouncer"); err != nil {
			t.Skip("pgbouncer not installed (apt-get install pgbouncer; .ci/run does)")
		}
	}
	dir, err := os.MkdirTemp("", "touba-pgb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	ini := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 40
logfile = %s
`, c.Port, port, filepath.Join(dir, "users.txt"), filepath.Join(dir, "pgbouncer.log"))
	for name, content := range map[string]string{"pgbouncer.ini": ini, "users.txt": `"touba" ""` + "\n"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pgbouncer: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Logf("pgbouncer log:\n%s", log)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = "127.0.0.1:" + strconv.Itoa(port)
	via := u.String()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, via)
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return via
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Fatalf("pgbouncer exited at start: %s\n%s", out.String(), log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer not accepting connections within 30s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
