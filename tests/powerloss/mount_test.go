package powerloss_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// disk is a backing folder (the disk) and a mount point where a lazyFS over
// it is mounted; power cuts remount it.
type disk struct {
	t                  *testing.T
	backing, mountPath string
	server             *fuse.Server
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
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || strings.Contains(err.Error(), "permission denied") ||
			strings.Contains(err.Error(), "not permitted") || strings.Contains(err.Error(), "fusermount") {
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
	root, err := newLazyFS(d.backing)
	if err != nil {
		return err
	}
	// Zero timeouts: the kernel asks for attributes again rather than trust
	// its copy (sizes live in the overlay). The page cache is still used
	// (no direct_io), which SQLite's mmap of the -shm file needs.
	zero := time.Duration(0)
	server, err := fs.Mount(d.mountPath, root, &fs.Options{
		EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{FsName: "lazyfs", Name: "powerloss", DirectMount: true,
			// The test process is the server: its own reads of the mount
			// must not wait on each other.
			MaxBackground: 64, Debug: os.Getenv("LAZYFS_DEBUG") != ""},
	})
	if err != nil {
		return err
	}
	d.server = server
	return nil
}

// unmount unmounts, retrying while the kernel still finds it busy (a
// killed process's files close just after it is reaped).
func (d *disk) unmount() {
	d.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := d.server.Unmount()
		if err == nil {
			d.server = nil
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("unmount %s: %v", d.mountPath, err)
		}
		time.Sleep(20 * time.Millisecond)
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
