package dist_test

import (
	"bufio"
	"debug/elf"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/gobuild"
	"github.com/touba/touba-trigger/internal/testkit"
)

// releaseVersion is the version the tests release under.
const releaseVersion = "0.99.0"

var (
	releaseOnce sync.Once
	releaseDir  string // scripts/release's first output
	releaseErr  string
	releaseArch []string
	releaseRev  string // the commit released: HEAD when the first test ran
)

// release runs scripts/release once per test binary (it builds the daemon
// for every architecture: the costly part) and returns its output folder
// and the architectures built. It skips when the tools are missing.
func release(t *testing.T) (string, []string) {
	t.Helper()
	heavy(t)
	need(t, "dpkg-deb", "dpkg")
	need(t, "x86_64-linux-gnu-gcc", "gcc")
	head, err := exec.Command("git", "-C", root(), "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skip("not a git checkout: scripts/release builds a commit")
	}
	releaseOnce.Do(func() {
		releaseArch = []string{"amd64"}
		if _, err := exec.LookPath("aarch64-linux-gnu-gcc"); err == nil {
			releaseArch = append(releaseArch, "arm64")
		} else {
			t.Log("aarch64-linux-gnu-gcc is missing (apt-get install gcc-aarch64-linux-gnu): releasing amd64 only")
		}
		// Removed after every test of the binary (gobuild.Main).
		dir, err := gobuild.Dir()
		if err != nil {
			releaseErr = err.Error()
			return
		}
		releaseDir = dir
		releaseRev = strings.TrimSpace(string(head))
		out, err := exec.Command(filepath.Join(root(), "scripts", "release"), releaseVersion,
			"--out", dir, "--arch", strings.Join(releaseArch, " "), "--rev", releaseRev).CombinedOutput()
		if err != nil {
			releaseErr = "scripts/release: " + err.Error() + "\n" + string(out)
		}
	})
	if releaseErr != "" {
		t.Fatal(releaseErr)
	}
	return releaseDir, releaseArch
}

// Same commit, same bytes: a second scripts/release, from another clone
// in another folder, writes the same SHA256SUMS (archives and packages).
// It shares the Go build cache with the first, so it shows that paths,
// timestamps, owners and ordering do not leak into the output; that the
// compiler itself is deterministic is shown by a rebuild with an empty
// cache (TOUBA_RELEASE_FRESH_CACHE=1, minutes: not run by default).
func TestReleaseIsReproducible(t *testing.T) {
	dir, arches := release(t)
	second := t.TempDir()
	cmd := exec.Command(filepath.Join(root(), "scripts", "release"), releaseVersion, "--out", second,
		"--arch", strings.Join(arches, " "), "--rev", releaseRev)
	if os.Getenv("TOUBA_RELEASE_FRESH_CACHE") == "1" {
		cmd.Env = append(os.Environ(), "GOCACHE="+t.TempDir())
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("second scripts/release: %v\n%s", err, out)
	}
	a, _ := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	b, _ := os.ReadFile(filepath.Join(second, "SHA256SUMS"))
	if len(a) == 0 || string(a) != string(b) {
		t.Fatalf("SHA256SUMS differ:\n%s\n---\n%s", a, b)
	}
	if got, want := strings.Count(string(a), "\n"), 2*len(arches); got != want {
		t.Fatalf("SHA256SUMS has %d lines, want %d:\n%s", got, want, a)
	}
	t.Logf("SHA256SUMS of two builds:\n%s", a)
}

// Each archive holds the binary (for its architecture), the units, the
// example, README, CHANGELOG, SECURITY and the docs, with every file the
// docs link (no relative link of a shipped .md leads outside the archive or
// to nothing); the amd64 binary runs and says the release version, the
// commit, unmodified.
func TestReleaseArchives(t *testing.T) {
	dir, arches := release(t)
	for _, arch := range arches {
		x := t.TempDir()
		name := "touba-trigger-" + releaseVersion + "-linux-" + arch
		run(t, x, nil, "tar", "-xzf", filepath.Join(dir, name+".tar.gz"))
		top := filepath.Join(x, name)
		for _, f := range []string{"touba-trigger", "serve-without-systemd", "systemd/touba-trigger.service", "systemd/touba-trigger.socket",
			"examples/quickstart/program.air.json", "examples/quickstart/touba.manifest.json", "README.md", "CHANGELOG.md", "SECURITY.md"} {
			if _, err := os.Stat(filepath.Join(top, f)); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		checkArchiveDocs(t, name, top)
		e, err := elf.Open(filepath.Join(top, "touba-trigger"))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
		if e.Machine != want {
			t.Errorf("%s: binary for %v, want %v", name, e.Machine, want)
		}
		e.Close()
		if arch != "amd64" {
			continue
		}
		var v struct {
			Version, Revision string
			Modified          bool
		}
		out := run(t, top, nil, filepath.Join(top, "touba-trigger"), "version", "--json")
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("version --json: %v\n%s", err, out)
		}
		if v.Version != releaseVersion || v.Revision != releaseRev || v.Modified {
			t.Fatalf("version --json = %+v, want %s at %s unmodified", v, releaseVersion, releaseRev)
		}
		run(t, top, nil, filepath.Join(top, "touba-trigger"), "check", "examples/quickstart/program.air.json",
			"--manifest", "examples/quickstart/touba.manifest.json")
	}
}

// files lists every file and symlink under dir (relative paths), leaving
// out dpkg's own database.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "var/lib/dpkg" {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			out = append(out, rel)
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// dpkgStatus is the package's status line in root's dpkg database.
func dpkgStatus(t *testing.T, root string) string {
	t.Helper()
	out, _ := exec.Command("dpkg-query", "--root="+root, "-W", "-f=${db:Status-Abbrev}", "touba-trigger").Output()
	return strings.TrimSpace(string(out))
}

// The Debian package, installed with dpkg into a root of its own (dpkg
// --root with --force-script-chrootless, so the maintainer scripts run
// with DPKG_ROOT set and this machine is left alone): the binary runs and
// says its version; every docs/*.md is in /usr/share/doc/touba-trigger;
// check accepts the installed example with the secret
// postinst made; the packaged unit names only paths the package installs;
// the touba user exists. dpkg -r leaves only configuration and state
// (/etc/touba, the empty /var/lib/touba-trigger) and the user; dpkg
// --purge removes those too, the user staying (Debian's rule for system
// users).
func TestDebianPackage(t *testing.T) {
	dir, _ := release(t)
	need(t, "dpkg", "dpkg")
	deb := filepath.Join(dir, "touba-trigger_"+releaseVersion+"_amd64.deb")
	r := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers", "etc"} {
		os.MkdirAll(filepath.Join(r, d), 0o755)
	}
	os.WriteFile(filepath.Join(r, "var/lib/dpkg/status"), nil, 0o644)
	before := files(t, r)
	dpkg := func(args ...string) string {
		// --force-depends: the root has no libc6 package in its database.
		return run(t, r, nil, "dpkg", append([]string{"--root=" + r, "--force-script-chrootless", "--force-depends", "--log=/dev/null"}, args...)...)
	}
	dpkg("-i", deb)
	if got := dpkgStatus(t, r); got != "ii" {
		t.Fatalf("after dpkg -i: status %q, want ii", got)
	}
	bin := filepath.Join(r, "usr/bin/touba-trigger")
	if out := run(t, r, nil, bin, "version"); !strings.HasPrefix(out, "touba-trigger "+releaseVersion+"\n") {
		t.Fatalf("installed version:\n%s", out)
	}
	checkPackageDocs(t, r)
	secret, err := os.ReadFile(filepath.Join(r, "etc/touba/credentials/webhook-secret"))
	if err != nil || !strings.HasPrefix(string(secret), "whsec_") {
		t.Fatalf("postinst made no signing secret: %v %q", err, secret)
	}
	if st, _ := os.Stat(filepath.Join(r, "etc/touba/credentials/webhook-secret")); st.Mode().Perm() != 0o600 {
		t.Fatalf("webhook-secret mode %v, want 0600", st.Mode().Perm())
	}
	out := run(t, r, []string{"CREDENTIALS_DIRECTORY=" + filepath.Join(r, "etc/touba/credentials")}, bin, "check",
		filepath.Join(r, "etc/touba/program.air.json"), "--manifest", filepath.Join(r, "etc/touba/touba.manifest.json"))
	t.Logf("check on the installed example:\n%s", out)
	passwd, _ := os.ReadFile(filepath.Join(r, "etc/passwd"))
	if !strings.Contains(string(passwd), "\ntouba:") && !strings.HasPrefix(string(passwd), "touba:") {
		t.Fatalf("no touba user in the root's /etc/passwd:\n%s", passwd)
	}
	if st, err := os.Stat(filepath.Join(r, "var/lib/touba-trigger")); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("state folder: %v %v", err, st)
	}
	// The unit names the package's own paths (not /usr/local, not /etc/touba-trigger).
	unit, err := os.ReadFile(filepath.Join(r, "lib/systemd/system/touba-trigger.service"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(unit)))
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") {
			continue
		}
		if strings.Contains(l, "/usr/local") || strings.Contains(l, "/etc/touba-trigger") {
			t.Errorf("packaged unit: %q names a path the package does not use", l)
		}
		for _, f := range strings.Fields(strings.NewReplacer("=", " ", ":", " ").Replace(l)) {
			if strings.HasPrefix(f, "/usr/bin/") || strings.HasPrefix(f, "/etc/touba/") {
				if _, err := os.Stat(filepath.Join(r, f)); err != nil {
					t.Errorf("packaged unit names %s, which is not installed: %v", f, err)
				}
			}
		}
	}
	conffiles := run(t, r, nil, "dpkg-query", "--root="+r, "-W", "-f=${Conffiles}", "touba-trigger")
	for _, f := range []string{"/etc/touba/program.air.json", "/etc/touba/touba.manifest.json"} {
		if !strings.Contains(conffiles, f) {
			t.Errorf("%s is not a conffile: %s", f, conffiles)
		}
	}

	// Without systemd as PID 1: the packaged script runs the daemon as the
	// unit would (here as nobody, in the test's root), the CLI finds it
	// where the profile settings point, and dpkg -r stops it.
	daemon := serveWithoutSystemd(t, r)
	if out := run(t, r, []string{"TOUBA_ADMIN_SOCKET=" + filepath.Join(r, "run/touba-trigger/admin.sock")}, bin,
		"triggers", "ls"); !strings.Contains(out, "trigger:") {
		t.Fatalf("the CLI on the daemon run without systemd:\n%s", out)
	}

	dpkg("-r", "touba-trigger")
	select {
	case <-daemon:
	case <-time.After(10 * time.Second):
		t.Fatal("dpkg -r left the daemon started without systemd running")
	}
	if got := dpkgStatus(t, r); got != "rc" {
		t.Fatalf("after dpkg -r: status %q, want rc", got)
	}
	// The user database (and its lock file) keeps the touba user.
	users := []string{"etc/group", "etc/gshadow", "etc/passwd", "etc/shadow", "etc/.pwd.lock"}
	kept := func(f string) bool {
		for _, b := range append(before, users...) {
			if f == b || f == b+"-" {
				return true
			}
		}
		return false
	}
	var left []string
	for _, f := range files(t, r) {
		// The state the daemon run without systemd wrote stays until a
		// purge, as under systemd (checked below).
		if !kept(f) && !strings.HasPrefix(f, "etc/touba/") && !strings.HasPrefix(f, "var/lib/touba-trigger/") &&
			!strings.Contains(conffiles, " /"+f+" ") {
			left = append(left, f)
		}
	}
	if len(left) > 0 {
		t.Fatalf("dpkg -r left files that are not configuration: %v", left)
	}
	for _, f := range []string{"etc/touba/program.air.json", "etc/touba/touba.manifest.json", "etc/touba/credentials/webhook-secret"} {
		if _, err := os.Stat(filepath.Join(r, f)); err != nil {
			t.Errorf("dpkg -r removed configuration %s: %v", f, err)
		}
	}

	dpkg("--purge", "touba-trigger")
	if got := dpkgStatus(t, r); got != "" && got != "un" && !strings.HasPrefix(got, "pn") {
		t.Fatalf("after dpkg --purge: status %q", got)
	}
	left = nil
	for _, f := range files(t, r) {
		if !kept(f) {
			left = append(left, f)
		}
	}
	for _, d := range []string{"etc/touba", "var/lib/touba-trigger"} {
		if _, err := os.Stat(filepath.Join(r, d)); err == nil {
			left = append(left, d+"/")
		}
	}
	if len(left) > 0 {
		t.Fatalf("dpkg --purge left %v", left)
	}
}

// lintian has nothing to say about the packages beyond the overrides in
// deploy/debian/lintian-overrides, each with its reason.
func TestDebianPackageLintian(t *testing.T) {
	dir, arches := release(t)
	lintian := need(t, "lintian", "lintian")
	for _, arch := range arches {
		deb := filepath.Join(dir, "touba-trigger_"+releaseVersion+"_"+arch+".deb")
		b, err := exec.Command(lintian, "--fail-on", "error,warning,info,pedantic", "--info", deb).CombinedOutput()
		out := strings.TrimSpace(strings.ReplaceAll(string(b), "running with root privileges is not recommended!", ""))
		if err != nil || out != "" {
			t.Errorf("lintian %s: %v\n%s", filepath.Base(deb), err, out)
		}
	}
}

// serveWithoutSystemd starts the package's serve-without-systemd in the
// root r, as nobody, and waits until the daemon listens; the channel closes
// when it exits (cleanly: a SIGTERM's exit 0).
func serveWithoutSystemd(t *testing.T, r string) <-chan struct{} {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("serve-without-systemd drops root to the touba user: run as root (.ci/run does)")
	}
	need(t, "setpriv", "util-linux")
	// The test's root and its parent are t.TempDir's, 0700: let the
	// daemon's user reach /etc/touba in it, as it does in a real root.
	for _, d := range []string{filepath.Dir(r), r} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(filepath.Join(r, "usr/libexec/touba-trigger/serve-without-systemd"),
		"--listen", "127.0.0.1:0", "--metrics-listen", "", "--allow-unisolated-handlers")
	cmd.Env = append(os.Environ(), "TOUBA_STATE_DIR="+filepath.Join(r, "var/lib/touba-trigger"),
		"TOUBA_RUNTIME_DIR="+filepath.Join(r, "run/touba-trigger"), "TOUBA_CONFIG_DIR="+filepath.Join(r, "etc/touba"),
		"TOUBA_USER=nobody", "TOUBA_BINARY="+filepath.Join(r, "usr/bin/touba-trigger"))
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		if err != nil {
			t.Errorf("the daemon run without systemd exited: %v\n%s", err, log.String())
		}
		close(done)
	}()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	testkit.WaitForReport(t, 30*time.Second, func() bool {
		if strings.Contains(log.String(), `"message":"listening"`) {
			return true
		}
		select {
		case <-done:
			t.Fatal("serve-without-systemd exited before listening")
		default:
		}
		return false
	}, "serve-without-systemd to listen", func() { t.Logf("its log:\n%s", log.String()) })
	return done
}

// syncBuffer is a bytes.Buffer for a child's output read while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
