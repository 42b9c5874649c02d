// Package pgtest starts a throwaway PostgreSQL 15 cluster for tests: one
// per test binary, in a temporary folder, on a free loopback port, owned by
// an unprivileged user when the tests run as root (PostgreSQL refuses to
// run as root). Each test gets a fresh database of its own, created from a
// template, so tests never see each other's rows.
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestX(t *testing.T) {
//		dsn := pgtest.New(t) // skips, saying why, when PostgreSQL 15 is missing
//		...
//	}
//
// The cluster starts at the first New, so a binary whose PostgreSQL tests
// are all filtered out starts nothing, and stops when Main's tests end.
package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BinDir is where Debian's postgresql-15 package puts the server binaries.
// TOUBA_PG_BINDIR overrides it.
var BinDir = "/usr/lib/postgresql/15/bin"

// Cluster is a running throwaway cluster.
type Cluster struct {
	Dir  string // the temporary folder: data/ and the socket
	Port int
	// Durable keeps fsync on (the benchmarks, which compare with SQLite's
	// synchronous=FULL); the tests turn it off.
	Durable bool
	cred    *syscall.Credential // nil when not root

	mu   sync.Mutex
	proc *exec.Cmd
	exit chan struct{}
	dbs  atomic.Int64
}

var (
	once     sync.Once
	shared   *Cluster
	startErr error
)

// Main runs the tests of a binary and stops the cluster after them.
func Main(m *testing.M) { os.Exit(M(m).Run()) }

// M wraps m so that its Run stops the binary's cluster after the tests:
// for a TestMain that runs them through another helper,
// gobuild.Main(pgtest.M(m), ...).
func M(m *testing.M) interface{ Run() int } { return runner{m} }

type runner struct{ m *testing.M }

func (r runner) Run() int {
	code := r.m.Run()
	if shared != nil {
		shared.Stop()
		os.RemoveAll(shared.Dir)
	}
	return code
}

// Available says whether the PostgreSQL 15 binaries are installed, and if
// not, why.
func Available() (bool, string) {
	if d := os.Getenv("TOUBA_PG_BINDIR"); d != "" {
		BinDir = d
	}
	if _, err := os.Stat(filepath.Join(BinDir, "initdb")); err != nil {
		return false, fmt.Sprintf("no %s (apt-get install postgresql-15; .ci/run does)", filepath.Join(BinDir, "initdb"))
	}
	return true, ""
}

// Shared returns the binary's cluster, starting it on first use. It skips
// t when PostgreSQL 15 is not installed and fails it when the cluster does
// not start.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	if ok, why := Available(); !ok {
		t.Skip("PostgreSQL 15 not installed: " + why)
	}
	once.Do(func() { shared, startErr = Start() })
	if startErr != nil {
		t.Fatalf("start PostgreSQL: %v", startErr)
	}
	return shared
}

// New returns the URL of a fresh, empty database on the binary's cluster;
// the database is dropped when t ends.
func New(t testing.TB) string {
	t.Helper()
	return Shared(t).NewDB(t)
}

// Own starts a cluster for t alone, stopped and removed when t ends: for
// the tests that stop and restart PostgreSQL under the daemon, which must
// not take the binary's shared cluster away from the other tests.
func Own(t testing.TB) *Cluster {
	t.Helper()
	if ok, why := Available(); !ok {
		t.Skip("PostgreSQL 15 not installed: " + why)
	}
	c, err := Start()
	if err != nil {
		t.Fatalf("start PostgreSQL: %v", err)
	}
	t.Cleanup(func() { c.Stop(); os.RemoveAll(c.Dir) })
	return c
}

// NewDB returns the URL of a fresh, empty database on c; the database is
// dropped when t ends (if c still runs).
func (c *Cluster) NewDB(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), c.dbs.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.exec(ctx, `CREATE DATABASE `+name+` TEMPLATE touba_template`); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		if !c.Running() {
			return // Own's cluster, stopped by the test or about to be removed
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// FORCE: a store a test left open must not keep the database.
		if err := c.exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	return c.URL(name)
}

// URL is the connection URL of database name on c.
func (c *Cluster) URL(name string) string {
	return fmt.Sprintf("postgres://touba@127.0.0.1:%d/%s?sslmode=disable", c.Port, name)
}

func (c *Cluster) exec(ctx context.Context, sql string) error { return c.Exec(ctx, "postgres", sql) }

// Start creates and starts a new cluster in a temporary folder.
func Start() (*Cluster, error) { return start(false) }

// StartDurable is Start with fsync on: every commit reaches the disk, as
// in production (for the benchmarks).
func StartDurable() (*Cluster, error) { return start(true) }

func start(durable bool) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "touba-pg-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, Durable: durable}
	if os.Getuid() == 0 {
		// PostgreSQL refuses root: run it as the postgres system user,
		// owner of the folder.
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root and no postgres user to run PostgreSQL as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	out, err := c.command(filepath.Join(BinDir, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "touba",
		"--auth=trust", "-E", "UTF8", "--no-instructions").CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	if c.Port, err = freePort(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := c.Restart(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// TOUBA_PGTEST_LC_COLLATE runs the tests on databases of that collation
	// (C: the one docs/performance.md recommends), the cluster's otherwise.
	collate := ""
	if v := os.Getenv("TOUBA_PGTEST_LC_COLLATE"); v != "" {
		collate = ` LC_COLLATE '` + strings.ReplaceAll(v, "'", "''") + `'`
	}
	if err := c.exec(ctx, `CREATE DATABASE touba_template TEMPLATE template0 ENCODING 'UTF8'`+collate); err != nil {
		c.Stop()
		os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = c.Dir
	// Its own process group, so a Ctrl-C of `go test` reaches it through
	// Stop rather than half-kill it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	return cmd
}

// Restart starts the server (again) on the same data and port, and waits
// until it accepts connections. fsync is off unless Durable: the tests
// restart the server but never the machine, and the disk is shared.
func (c *Cluster) Restart() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil {
		return nil
	}
	fsync := "off"
	if c.Durable {
		fsync = "on"
	}
	cmd := c.command(filepath.Join(BinDir, "postgres"), "-D", filepath.Join(c.Dir, "data"),
		"-p", strconv.Itoa(c.Port), "-k", c.Dir, "-c", "listen_addresses=127.0.0.1",
		"-c", "fsync="+fsync, "-c", "full_page_writes="+fsync, "-c", "max_connections=300",
		"-c", "shared_buffers=64MB", "-c", "log_min_messages=fatal")
	logf, err := os.Create(filepath.Join(c.Dir, "postgres.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start postgres: %w", err)
	}
	exit := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exit) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		cancel()
		if err == nil {
			conn.Close(context.Background())
			break
		}
		select {
		case <-exit:
			log, _ := os.ReadFile(filepath.Join(c.Dir, "postgres.log"))
			return fmt.Errorf("postgres exited at start: %s", strings.TrimSpace(string(log)))
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exit
			return fmt.Errorf("postgres not accepting connections within 60s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.proc, c.exit = cmd, exit
	return nil
}

// Running says whether the server runs (between Restart and Stop).
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc != nil
}

// Exec runs one statement as the superuser on database name (for a test
// that changes the server's settings, such as synchronous_commit).
func (c *Cluster) Exec(ctx context.Context, name, sql string) error {
	conn, err := pgx.Connect(ctx, c.URL(name))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// Crash ends the server as a crash would for its clients and standbys:
// an immediate shutdown (SIGQUIT: no checkpoint, no waiting for standbys
// to have the WAL; the next start recovers), and waits for it to exit.
func (c *Cluster) Crash() { c.stop(syscall.SIGQUIT) }

// Stop stops the server (fast shutdown: clients are disconnected, nothing
// committed is lost) and waits for it to exit.
func (c *Cluster) Stop() { c.stop(syscall.SIGINT) }

// stop sends the server sig and waits for it to exit, killing it if it
// has not exited within 30 seconds.
func (c *Cluster) stop(sig syscall.Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return
	}
	c.proc.Process.Signal(sig)
	select {
	case <-c.exit:
	case <-time.After(30 * time.Second):
		c.proc.Process.Kill()
		<-c.exit
	}
	c.proc = nil
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
