package powerloss_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// disk is a backing folder (the disk) and a mount point where a lazyFS over
// it is mounted; power cuts remount it.
//
// The filesystem is served by a child process (this test binary, started
// with lazyfsEnv), never by the test process itself: a process that both
// serves a FUSE mount and uses it can deadlock, the Go runtime stopping the
// world while one of its threads waits on a request that only its own
// (stopped) goroutines can answer (seen under -race).
type disk struct {
	t                  *testing.T
	backing, mountPath string
	server             *exec.Cmd
	stdin              io.Closer
}

// lazyfsEnv makes the test binary serve a lazyFS: "backing:mountpoint" (temp folders).
// It answers "ready" (or "error: ...") on stdout, and unmounts and exits
// when its stdin closes.
const lazyfsEnv = "POWERLOSS_LAZYFS_SERVE"

// serveLazyFS is the child's side of lazyfsEnv.
func serveLazyFS(spec string) int {
	backing, mountPath, _ := strings.Cut(spec, ":")
	root, err := newLazyFS(backing)
	var server *fuse.Server
	if err == nil {
		// Zero timeouts: the kernel asks for attributes again rather than
		// trust its copy (sizes live in the overlay). The page cache is
		// still used (no direct_io), which SQLite's mmap of -shm needs.
		zero := time.Duration(0)
		server, err = fs.Mount(mountPath, root, &fs.Options{
			EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero,
			MountOptions: fuse.MountOptions{FsName: "lazyfs", Name: "powerloss", DirectMount: true,
				MaxBackground: 64, Debug: os.Getenv("LAZYFS_DEBUG") != ""},
		})
	}
	if err != nil {
		fmt.Printf("error: %v\n", err)
		return 1
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	// Busy while the kernel still holds a killed process's files: they
	// close just after it is reaped.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := server.Unmount(); err == nil {
			return 0
		} else if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "unmount %s: %v\n", mountPath, err)
			return 1
		}
		time.Sleep(20 * time.Millisecond) // a poll: the mount child has no testing.TB for testkit.WaitFor
	}
}

// newDisk mounts a lazyFS over a fresh folder, or skips the test, saying
// why, where this machine cannot mount FUSE.
func newDisk(t *testing.T) *disk {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("skipped: no FUSE here (%v); the power-loss test needs /dev/fuse (apt-get install fuse3; modprobe fuse)", err)
	}
	d := &disk{t: t, backing: t.TempDir(), mountPath: t.TempDir()}
	if err := d.mount(); err != nil {
		if strings.Contains(err.Error(), "permission denied") || strings.Contains(err.Error(), "not permitted") ||
			strings.Contains(err.Error(), "fusermount") {
			t.Skipf("skipped: cannot mount FUSE here: %v", err)
		}
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		if d.server != nil {
			d.unmount()
		}
	})
	return d
}

func (d *disk) mount() error {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), lazyfsEnv+"="+d.backing+":"+d.mountPath)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "ready\n" {
		stdin.Close()
		cmd.Wait()
		return fmt.Errorf("lazyfs server: %q", strings.TrimSpace(line))
	}
	d.server, d.stdin = cmd, stdin
	return nil
}

// unmount stops the server, which unmounts first. A server that does not
// end is killed and its mount detached, so that nothing waits on it.
func (d *disk) unmount() {
	d.t.Helper()
	d.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- d.server.Wait() }()
	select {
	case err := <-done:
		d.server = nil
		if err != nil {
			syscall.Unmount(d.mountPath, syscall.MNT_DETACH)
			d.t.Fatalf("lazyfs server: %v", err)
		}
	case <-time.After(60 * time.Second):
		d.server.Process.Kill()
		syscall.Unmount(d.mountPath, syscall.MNT_DETACH)
		<-done
		d.server = nil
		d.t.Fatalf("lazyfs server did not unmount %s within 60s", d.mountPath)
	}
}

// cut is the power cut, once every process using the mount is gone: every
// write not followed by an fsync of its file is lost.
func (d *disk) cut() {
	d.t.Helper()
	d.unmount()
	if err := d.mount(); err != nil {
		d.t.Fatalf("remount after a cut: %v", err)
	}
}

// path is name under the mount.
func (d *disk) path(name string) string { return d.mountPath + "/" + name }

// onDisk is name in the backing folder: what survives a cut.
func (d *disk) onDisk(name string) string { return d.backing + "/" + name }

func (d *disk) String() string { return fmt.Sprintf("lazyfs %s over %s", d.mountPath, d.backing) }
