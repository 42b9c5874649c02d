package isolation_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
)

// noNamespaces is a shell script that forbids new user and network
// namespaces (in the user namespace it runs in, and every one below it),
// then runs its arguments: a real host where isolation cannot work, as in
// a container whose runtime allows none.
const noNamespaces = `echo 0 > /proc/sys/user/max_user_namespaces && echo 0 > /proc/sys/user/max_net_namespaces && exec "$@"`

// withoutNamespaces makes cmd run under noNamespaces, as root of a user
// namespace of its own (mapped to the test's uid and gid), or skips the
// test where the host gives no user namespace.
func withoutNamespaces(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}}
	probe := exec.Command("/bin/sh", "-c", noNamespaces, "sh", "true")
	probe.SysProcAttr = attr
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("cannot make a user namespace that forbids namespaces: %v %s", err, out)
	}
	c := exec.Command("/bin/sh", append([]string{"-c", noNamespaces, "sh", cmd.Path}, cmd.Args[1:]...)...)
	c.Dir, c.SysProcAttr = cmd.Dir, attr
	return c
}

// On a host that cannot isolate, start-up is refused (exit 2,
// NetworkIsolationUnavailable) naming the binding without the network
// grant, and only it; with --allow-unisolated-handlers (here its variable)
// the daemon starts, warns naming it, and the handler has the host's
// network.
func TestStartRefusedWithoutIsolation(t *testing.T) {
	addr := listen(t)
	dir, daemonBin := daemonDir(t)
	copyExec(t, dialBin, filepath.Join(dir, "dial"))
	writeFile(t, filepath.Join(dir, "program.air.json"), signedProgram("Dial", "tool:iso/Closed", "tool:iso/Open"))
	writeFile(t, filepath.Join(dir, "touba.manifest.json"), dialManifest(dir, addr))
	secret := "isolation-" + fmt.Sprint(time.Now().UnixNano())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := withoutNamespaces(t, serveCmd(dir, daemonBin))
	cmd.Env = append(os.Environ(), secretVar+"="+secret)
	var combined strings.Builder
	cmd.Stdout, cmd.Stderr = &combined, &combined
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		cmd.Process.Kill()
		<-done
		t.Fatalf("the daemon did not stop within 30s:\n%s", combined.String())
	}
	if got, want := cmd.ProcessState.ExitCode(), 2; got != want {
		t.Fatalf("exit code %d (%v), want %d:\n%s", got, err, want, combined.String())
	}
	line := lastLine(combined.String())
	if !strings.HasPrefix(line, "NetworkIsolationUnavailable: ") || !strings.Contains(line, "tool:iso/Closed") ||
		strings.Contains(line, "tool:iso/Open") {
		t.Fatalf("refusal %q, want NetworkIsolationUnavailable naming tool:iso/Closed only", line)
	}
	t.Logf("refused: %s", line)
	if _, err := os.Stat(filepath.Join(dir, "q.sqlite")); err == nil {
		t.Fatal("the refused daemon created its queue file")
	}

	d := testkit.StartCmd(t, withoutNamespaces(t, serveCmd(dir, daemonBin)),
		[]string{secretVar + "=" + secret, "TOUBA_ALLOW_UNISOLATED_HANDLERS=true"})
	w := warning(d.Log(), "isolation")
	if !strings.Contains(w, `"bindings":["tool:iso/Closed"]`) {
		t.Fatalf("no warning naming tool:iso/Closed:\n%s", d.Log())
	}
	deliver(t, d, "Dial", "ev-1", secret)
	d.WaitLog(`"message":"run done"`, 30*time.Second)
	if r := readDial(t, filepath.Join(dir, "closed.json")); !r.Connected {
		t.Fatalf("allowed unisolated, the handler still had no network: %s", r.DialErr)
	}
}

// A SIGHUP reload that adds a binding without the network grant on a host
// that cannot isolate is refused like an invalid configuration: the old
// one keeps running. With --allow-unisolated-handlers it is put in force,
// with the warning.
func TestReloadRefusedWithoutIsolation(t *testing.T) {
	for _, allow := range []bool{false, true} {
		t.Run(fmt.Sprintf("allow %v", allow), func(t *testing.T) {
			addr := listen(t)
			dir, daemonBin := daemonDir(t)
			copyExec(t, dialBin, filepath.Join(dir, "dial"))
			openOnly := fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:iso/Open": {"handler": {"kind": "process", "command": %q, "args": [%q, %q]},
    "grants": ["network"], "timeout_ms": 30000, "effect_contract": {"kind": "none"}}}}`,
				filepath.Join(dir, "dial"), filepath.Join(dir, "open.json"), addr)
			writeFile(t, filepath.Join(dir, "program.air.json"), signedProgram("Dial", "tool:iso/Open"))
			writeFile(t, filepath.Join(dir, "touba.manifest.json"), openOnly)
			secret := "isolation-" + fmt.Sprint(time.Now().UnixNano())
			var extra []string
			if allow {
				extra = append(extra, "--allow-unisolated-handlers")
			}
			d := testkit.StartCmd(t, withoutNamespaces(t, serveCmd(dir, daemonBin, extra...)), []string{secretVar + "=" + secret})
			if w := warning(d.Log(), "isolation"); w != "" {
				t.Fatalf("warned with nothing to isolate: %s", w)
			}

			writeFile(t, filepath.Join(dir, "program.air.json"), signedProgram("Dial", "tool:iso/Closed", "tool:iso/Open"))
			writeFile(t, filepath.Join(dir, "touba.manifest.json"), dialManifest(dir, addr))
			d.Signal(syscall.SIGHUP)
			if !allow {
				d.WaitLog(`"message":"reload refused; keeping the running configuration"`, 30*time.Second)
				if !strings.Contains(d.Log(), "NetworkIsolationUnavailable") || !strings.Contains(d.Log(), "tool:iso/Closed") {
					t.Fatalf("the refused reload does not say why:\n%s", d.Log())
				}
			} else {
				d.WaitLog(`"message":"configuration reloaded"`, 30*time.Second)
				if w := warning(d.Log(), "isolation"); !strings.Contains(w, `"bindings":["tool:iso/Closed"]`) {
					t.Fatalf("no warning naming tool:iso/Closed:\n%s", d.Log())
				}
			}
			deliver(t, d, "Dial", "ev-1", secret)
			d.WaitLog(`"message":"run done"`, 30*time.Second)
			_, err := os.Stat(filepath.Join(dir, "closed.json"))
			if ran := err == nil; ran != allow {
				t.Fatalf("tool:iso/Closed ran: %v, want %v (the old configuration kept: %v)", ran, allow, !allow)
			}
			readDial(t, filepath.Join(dir, "open.json"))
		})
	}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// check says whether this host isolates, for the user it runs as, and
// names the bindings that need it; where isolation is unavailable it
// warns that serve would refuse them, and still exits 0.
func TestCheckSaysWhetherIsolationWorks(t *testing.T) {
	dir, daemonBin := daemonDir(t)
	copyExec(t, dialBin, filepath.Join(dir, "dial"))
	writeFile(t, filepath.Join(dir, "program.air.json"), signedProgram("Dial", "tool:iso/Closed", "tool:iso/Open"))
	writeFile(t, filepath.Join(dir, "touba.manifest.json"), dialManifest(dir, "127.0.0.1:9"))
	check := func() *exec.Cmd {
		c := exec.Command(daemonBin, "check", filepath.Join(dir, "program.air.json"), "--manifest", filepath.Join(dir, "touba.manifest.json"))
		c.Dir, c.Env = dir, append(os.Environ(), secretVar+"=s")
		return c
	}
	for _, tt := range []struct {
		name, want string
		warn       bool
	}{
		{"as the daemon's user", "network isolation available: ", false},
		{"without namespaces", "network isolation unavailable for uid 0 on this host: ", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := check()
			if tt.warn {
				cmd = withoutNamespaces(t, cmd)
				cmd.Env = check().Env
			} else {
				asNobody(t, dir, cmd)
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("check: %v\n%s", err, out)
			}
			var line, warn string
			for _, l := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(l, "network isolation ") {
					line = l
				}
				if strings.HasPrefix(l, "warning: serve refuses") {
					warn = l
				}
			}
			if !strings.HasPrefix(line, tt.want) || !strings.HasSuffix(line, "bindings without the network grant: tool:iso/Closed") {
				t.Fatalf("isolation line %q, want %q... naming tool:iso/Closed:\n%s", line, tt.want, out)
			}
			if (warn != "") != tt.warn || (tt.warn && !strings.Contains(warn, "NetworkIsolationUnavailable")) {
				t.Fatalf("warning %q, want one: %v\n%s", warn, tt.warn, out)
			}
			t.Log(line)
		})
	}
}
