package dist_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
)

// The image of deploy/Containerfile, built by scripts/image with podman
// (which cannot run containers on this machine, so the test runs what is
// inside it in a chroot): its file system is the binary, CA certificates,
// zoneinfo, passwd/group and /etc/touba and nothing else (no shell); its
// user is numeric and not root; and, with the image's own environment,
// working folder, user and command, the binary prints its version,
// checks the shipped example and serves it: /readyz answers 200 and a
// delivery 202, and the run completes.
func TestContainerImage(t *testing.T) {
	heavy(t)
	podman := need(t, "podman", "podman")
	if os.Geteuid() != 0 {
		t.Skip("the image's binary runs in a chroot, which needs root")
	}
	tag := "localhost/touba-trigger:dist-test"
	start := time.Now()
	run(t, root(), nil, filepath.Join(root(), "scripts", "image"), "--tag", tag, "--version", "0.99.0-image")
	t.Logf("scripts/image took %v", time.Since(start).Round(time.Second))
	t.Cleanup(func() { exec.Command(podman, "rmi", "-f", tag).Run() })

	var cfg struct {
		User, WorkingDir string
		Env, Entrypoint  []string
		Cmd              []string
	}
	if err := json.Unmarshal([]byte(run(t, "", nil, podman, "image", "inspect", "--format", "{{json .Config}}", tag)), &cfg); err != nil {
		t.Fatal(err)
	}
	size := strings.TrimSpace(run(t, "", nil, podman, "image", "inspect", "--format", "{{.Size}}", tag))
	t.Logf("image size: %s bytes", size)
	if cfg.User == "" || strings.HasPrefix(cfg.User, "0:") || cfg.User == "0" || strings.Trim(cfg.User, "0123456789:") != "" {
		t.Fatalf("image user %q: want a numeric non-root uid:gid", cfg.User)
	}

	// The file system, as podman would give a container.
	fs := t.TempDir()
	ctr := strings.TrimSpace(run(t, "", nil, podman, "create", tag))
	t.Cleanup(func() { exec.Command(podman, "rm", "-f", ctr).Run() })
	tarball := filepath.Join(t.TempDir(), "fs.tar")
	run(t, "", nil, podman, "export", "--output", tarball, ctr)
	run(t, fs, nil, "tar", "-xf", tarball)
	var unexpected []string
	filepath.Walk(fs, func(p string, info os.FileInfo, err error) error {
		rel, _ := filepath.Rel(fs, p)
		if info.IsDir() || strings.HasPrefix(rel, "usr/share/zoneinfo/") {
			return nil
		}
		switch rel {
		case "usr/bin/touba-trigger", "etc/ssl/certs/ca-certificates.crt", "etc/passwd", "etc/group",
			"etc/touba/program.air.json", "etc/touba/touba.manifest.json", "etc/touba/dev-webhook-secret":
		default:
			unexpected = append(unexpected, rel)
		}
		return nil
	})
	sort.Strings(unexpected)
	if len(unexpected) > 0 {
		t.Fatalf("unexpected files in the image: %v", unexpected)
	}
	for _, f := range []string{"usr/share/zoneinfo/Europe/Paris", "usr/share/zoneinfo/UTC"} {
		if _, err := os.Stat(filepath.Join(fs, f)); err != nil {
			t.Fatalf("zoneinfo: %v", err)
		}
	}
	if st, err := os.Stat(filepath.Join(fs, "var/lib/touba-trigger")); err != nil || !st.IsDir() {
		t.Fatalf("no state folder: %v", err)
	}

	// Run as the image would: its user, environment and working folder.
	chroot := func(args ...string) *exec.Cmd {
		cmd := exec.Command("chroot", append([]string{"--userspec=" + cfg.User, fs}, args...)...)
		cmd.Dir = filepath.Join(fs, cfg.WorkingDir)
		cmd.Env = cfg.Env
		return cmd
	}
	out, err := chroot(append(cfg.Entrypoint, "version")...).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "touba-trigger 0.99.0-image\n") {
		t.Fatalf("version in the image: %v\n%s", err, out)
	}
	if out, err := chroot(append(cfg.Entrypoint, "check", "/etc/touba/program.air.json", "--manifest", "/etc/touba/touba.manifest.json")...).CombinedOutput(); err != nil {
		t.Fatalf("check in the image: %v\n%s", err, out)
	}
	// The image's own command, its listeners moved to free loopback ports.
	// (StartCmd puts the test's environment first; the image's wins.)
	d := testkit.StartCmd(t, chroot(append(cfg.Entrypoint, cfg.Cmd...)...),
		append(cfg.Env, "TOUBA_LISTEN=127.0.0.1:0", "TOUBA_METRICS_LISTEN=127.0.0.1:0"))
	if code, body := testkit.Get(t, d.URL()+"/readyz"); code != 200 {
		t.Fatalf("/readyz in the image: %d %s", code, body)
	}
	if code, _ := testkit.Post(t, d.URL()+"/triggers/examples.billing/Invoice", "inv-image", `{"amount": 10}`); code != 202 {
		t.Fatalf("POST in the image: %d, want 202", code)
	}
	d.WaitLog(`"run done"`, 30*time.Second)
	if _, err := os.Stat(filepath.Join(fs, "var/lib/touba-trigger/touba.trigger-queue.sqlite")); err != nil {
		t.Fatalf("the queue is not in the state folder: %v", err)
	}
}
