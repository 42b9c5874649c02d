// Package rabbittest runs a throwaway RabbitMQ node for the rabbitmq
// binding's tests, from Debian's rabbitmq-server package: its own Erlang
// port mapper (epmd) on a free port, its own node name, AMQP and
// distribution ports, database (RABBITMQ_MNESIA_BASE), logs
// (RABBITMQ_LOG_BASE), configuration and HOME (the Erlang cookie) in a
// temporary folder. It never touches the system's service or its files.
// Kill and Restart keep the ports and the database, so a test can take the
// broker down (SIGKILL) and bring it back with its queues and the persistent
// messages it confirmed.
//
//	s := rabbittest.Start(t) // skips, saying why, when rabbitmq-server is missing
//	s.Declare("orders", "topic", "orders.all", "orders.#")
package rabbittest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Server is where Debian's package puts the broker's start script; the
// TOUBA_RABBITMQ_SERVER environment variable overrides it.
var Server = "/usr/lib/rabbitmq/bin/rabbitmq-server"

// Epmd is the Erlang port mapper the node registers with (erlang-base).
var Epmd = "epmd"

// startTimeout bounds a node's start, until it takes AMQP connections.
const startTimeout = 90 * time.Second

var seq atomic.Int64

// Available says whether the broker can be started here, and if not why.
func Available() (bool, string) {
	bin := Server
	if s := os.Getenv("TOUBA_RABBITMQ_SERVER"); s != "" {
		bin = s
	}
	if _, err := os.Stat(bin); err != nil {
		return false, "rabbitmq-server is not installed (" + bin + " missing; apt-get install rabbitmq-server, .ci/run does)"
	}
	if _, err := exec.LookPath(Epmd); err != nil {
		return false, "epmd is not installed (it comes with erlang-base, a dependency of rabbitmq-server)"
	}
	return true, ""
}

// Node is one running throwaway RabbitMQ node.
type Node struct {
	tb         testing.TB
	Dir        string // the temporary folder: mnesia/, log/, home/, rabbitmq.conf
	Name       string // the Erlang node name, touba-test-PID-N@localhost
	Port       int    // AMQP, on 127.0.0.1
	TLSPort    int    // AMQP over TLS, when started with a certificate
	distPort   int
	epmdPort   int
	bin        string
	mu         sync.Mutex
	epmd, node *exec.Cmd
	nodeDone   chan struct{}
	epmdDone   chan struct{}
}

// Options are a node's extras.
type Options struct {
	// CertPEM, KeyPEM and CAPEM add a TLS listener on 127.0.0.1:TLSPort
	// that requires a client certificate signed by CAPEM.
	CertPEM, KeyPEM, CAPEM []byte
}

// Start runs a node and waits until it takes AMQP connections; it is
// stopped, its processes ended and its folder removed when tb ends. It
// skips tb, saying why, when rabbitmq-server is not installed.
func Start(tb testing.TB) *Node {
	tb.Helper()
	return StartWith(tb, Options{})
}

// StartWith is Start with the extras of o.
func StartWith(tb testing.TB, o Options) *Node {
	tb.Helper()
	if ok, why := Available(); !ok {
		tb.Skip(why)
	}
	bin := Server
	if s := os.Getenv("TOUBA_RABBITMQ_SERVER"); s != "" {
		bin = s
	}
	dir, err := os.MkdirTemp("", "touba-rabbit-")
	if err != nil {
		tb.Fatal(err)
	}
	n := &Node{tb: tb, Dir: dir, bin: bin, Name: fmt.Sprintf("touba-test-%d-%d@localhost", os.Getpid(), seq.Add(1))}
	tb.Cleanup(func() {
		n.stop()
		if tb.Failed() {
			if log, err := os.ReadFile(filepath.Join(dir, "node.out")); err == nil {
				tb.Logf("rabbitmq node %s output (last 4 KB):\n%s", n.Name, tail(log, 4096))
			}
		}
		os.RemoveAll(dir)
	})
	for _, sub := range []string{"mnesia", "log", "home"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			tb.Fatal(err)
		}
	}
	ports, err := freePorts(4)
	if err != nil {
		tb.Fatal(err)
	}
	n.Port, n.distPort, n.epmdPort = ports[0], ports[1], ports[2]
	conf := fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\n", n.Port)
	if o.CertPEM != nil {
		n.TLSPort = ports[3]
		for name, b := range map[string][]byte{"cert.pem": o.CertPEM, "key.pem": o.KeyPEM, "ca.pem": o.CAPEM} {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				tb.Fatal(err)
			}
		}
		conf += fmt.Sprintf("listeners.ssl.1 = 127.0.0.1:%d\nssl_options.cacertfile = %s\nssl_options.certfile = %s\n"+
			"ssl_options.keyfile = %s\nssl_options.verify = verify_peer\nssl_options.fail_if_no_peer_cert = true\n",
			n.TLSPort, filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	}
	for name, text := range map[string]string{"rabbitmq.conf": conf, "rabbitmq-env.conf": "", "enabled_plugins": "[].\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	n.startEpmd()
	n.Restart()
	return n
}

// URL is amqp://127.0.0.1:PORT/ (the default vhost; guest logs in).
func (n *Node) URL() string { return "amqp://127.0.0.1:" + strconv.Itoa(n.Port) + "/" }

// Addr is 127.0.0.1:PORT.
func (n *Node) Addr() string { return "127.0.0.1:" + strconv.Itoa(n.Port) }

// startEpmd runs the node's own port mapper in the foreground, as a child
// of the test, so that it ends with the test (a node starts one in the
// background otherwise, which would outlive it).
func (n *Node) startEpmd() {
	n.tb.Helper()
	cmd := exec.Command(Epmd, "-port", strconv.Itoa(n.epmdPort), "-address", "127.0.0.1")
	out, err := os.Create(filepath.Join(n.Dir, "epmd.out"))
	if err != nil {
		n.tb.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		n.tb.Fatalf("start epmd: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	n.epmd, n.epmdDone = cmd, done
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(n.epmdPort), time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			n.tb.Fatalf("epmd not listening on %d: %v", n.epmdPort, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Restart starts the node (again, after Kill) on the same ports and
// database, and waits until it takes AMQP connections.
func (n *Node) Restart() {
	n.tb.Helper()
	env := append(os.Environ(),
		"HOME="+filepath.Join(n.Dir, "home"),
		"RABBITMQ_NODENAME="+n.Name,
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(n.Dir, "rabbitmq-env.conf"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(n.Dir, "rabbitmq.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(n.Dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(n.Dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(n.Dir, "log"),
		"RABBITMQ_LOGS=-", // to node.out
		"RABBITMQ_NODE_PORT="+strconv.Itoa(n.Port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(n.distPort),
		"ERL_EPMD_PORT="+strconv.Itoa(n.epmdPort),
		// The distribution listener on loopback only; the node starts no
		// port mapper of its own (the test's is running).
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1} -start_epmd false",
	)
	cmd := exec.Command(n.bin)
	cmd.Env = env
	cmd.Dir = n.Dir
	out, err := os.OpenFile(filepath.Join(n.Dir, "node.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		n.tb.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	// A process group of its own: the start script, the Erlang VM and its
	// helpers (erl_child_setup, inet_gethost) are killed together.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		n.tb.Fatalf("start rabbitmq-server: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	n.mu.Lock()
	n.node, n.nodeDone = cmd, done
	n.mu.Unlock()
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := amqp.DialConfig(n.URL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(n.Dir, "node.out"))
			n.tb.Fatalf("rabbitmq-server exited at start:\n%s", tail(log, 4096))
		default:
		}
		if time.Now().After(deadline) {
			n.tb.Fatalf("rabbitmq node %s not taking connections within %s: %v", n.Name, startTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Kill ends the node at once (SIGKILL to its process group: the VM gets no
// chance to flush or close anything) and waits until it is gone.
func (n *Node) Kill() {
	n.mu.Lock()
	cmd, done := n.node, n.nodeDone
	n.node = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
	// The VM's helpers are in the group too; the listener is closed once
	// the VM is gone.
}

// stop ends the node (SIGTERM to the start script, which stops the VM;
// SIGKILL to the group after 30 s) and the port mapper.
func (n *Node) stop() {
	n.mu.Lock()
	cmd, done := n.node, n.nodeDone
	n.node = nil
	n.mu.Unlock()
	if cmd != nil {
		syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	if n.epmd != nil {
		syscall.Kill(-n.epmd.Process.Pid, syscall.SIGKILL)
		<-n.epmdDone
		n.epmd = nil
	}
}

// freePorts returns k distinct free loopback ports.
func freePorts(k int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for range k {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	if len(out) != k {
		return nil, errors.New("no free ports")
	}
	return out, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
