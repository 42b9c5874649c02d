package powerloss_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// A lazyFS is a loopback filesystem over a backing folder that stands for the
// disk. What it models (the same idea as Jepsen's LazyFS):
//
//   - File data and size: a write or a truncate goes to an in-memory overlay
//     of the file (dirty 4 KiB pages, the logical size, and the lowest size
//     the file was truncated to), served on reads, so processes see their own
//     writes. An fsync or fdatasync of any handle of the file writes its
//     overlay to the backing file; a power cut (drop) throws every overlay
//     away. An fsync is atomic here: a cut never lands inside one.
//   - Directory operations (create, unlink, rename, mkdir) go to the backing
//     folder at once, as if every one were followed by an fsync of its
//     directory: a file created and never synced survives a cut, empty (or
//     with the size of its last sync). This is kinder than a real disk,
//     where an unsynced create may vanish; the daemon's SQLite files are
//     created once and SQLite syncs the directory after creating its WAL.
//   - Shared memory: SQLite maps its -shm file; mmap works because the mount
//     uses the page cache (no direct_io), and dirty mapped pages reach the
//     overlay as writes. The -shm is never synced, so a cut loses it, as it
//     loses a real machine's memory; SQLite rebuilds it from the WAL.
//   - File locks (flock, fcntl) stay in the kernel (go-fuse does not ask for
//     them), which holds them per mount, as a single host does.
//
// The kernel page cache of the mount would outlive a drop, so a cut is:
// kill every process using the mount, unmount (the kernel then writes back
// what the killed processes left dirty, into overlays that are then thrown
// away), and mount a fresh lazyFS over the same backing folder.

// node is a loopback node whose file data goes through its overlay.
type node struct {
	*fs.LoopbackNode
	overlays *overlays
}

// newLazyFS returns the root node of a lazyFS over backing.
func newLazyFS(backing string) (*node, error) {
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, err
	}
	return &node{LoopbackNode: root.(*fs.LoopbackNode), overlays: &overlays{files: map[fs.StableAttr]*overlay{}}}, nil
}

var _ fs.NodeWrapChilder = (*node)(nil)

// WrapChild makes every node of the tree a node of this mount.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), overlays: n.overlays}
}

// backingPath is the file's path in the backing folder.
func (n *node) backingPath() string {
	return filepath.Join(n.RootData.Path, n.Path(n.RootData.RootNode.EmbeddedInode()))
}

func (n *node) overlay() *overlay { return n.overlays.get(n.StableAttr()) }

// attr reads the backing file's attributes (through h when given, else by
// path) and puts in the logical size, under the overlay's lock: a sync
// between the two would show the backing file half written, and a smaller
// size makes the kernel drop cached pages of the file.
func (n *node) attr(ctx context.Context, h *handle, out *fuse.AttrOut) syscall.Errno {
	o := n.overlay()
	o.mu.Lock()
	defer o.mu.Unlock()
	if h != nil {
		var st syscall.Stat_t
		if err := syscall.Fstat(h.fd, &st); err != nil {
			return fs.ToErrno(err)
		}
		out.FromStat(&st)
	} else if errno := n.LoopbackNode.Getattr(ctx, nil, out); errno != 0 {
		return errno
	}
	if o.active {
		setSize(&out.Attr, o.size)
	}
	return 0
}

func setSize(a *fuse.Attr, size int64) {
	a.Size = uint64(size)
	a.Blocks = (a.Size + 511) / 512
}

// openBacking opens the backing file at path read-write whatever the
// caller asked: an fsync through a read-only handle must still be able to
// write the overlay. O_TRUNC and O_APPEND are the overlay's business.
func openBacking(o *overlay, path string, flags uint32) (*handle, syscall.Errno) {
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	h := &handle{o: o, fd: fd}
	if flags&syscall.O_TRUNC != 0 {
		if errno := o.truncate(fd, 0); errno != 0 {
			syscall.Close(fd)
			return nil, errno
		}
	}
	return h, 0
}

var (
	_ fs.NodeLookuper  = (*node)(nil)
	_ fs.NodeOpener    = (*node)(nil)
	_ fs.NodeCreater   = (*node)(nil)
	_ fs.NodeGetattrer = (*node)(nil)
	_ fs.NodeSetattrer = (*node)(nil)
	_ fs.NodeUnlinker  = (*node)(nil)
	_ fs.NodeRenamer   = (*node)(nil)
)

// Lookup answers with the logical size too: the kernel takes the size in
// a lookup's answer as the file's, and one smaller than what a process has
// mapped (SQLite's -shm) makes its next access fault with SIGBUS.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, errno := n.LoopbackNode.Lookup(ctx, name, out)
	if errno != 0 {
		return nil, errno
	}
	if size, ok := n.overlays.get(ch.StableAttr()).sizeOf(); ok {
		setSize(&out.Attr, size)
	}
	return ch, 0
}

// Open keeps the kernel's page cache across opens (FOPEN_KEEP_CACHE): every
// change goes through this mount, so the cache is never stale, and SQLite's
// mapped -shm pages are not dropped each time another connection opens it.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h, errno := openBacking(n.overlay(), n.backingPath(), flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return h, fuse.FOPEN_KEEP_CACHE, 0
}

// Create makes the file in the backing folder at once (directory
// operations are not delayed, see lazyFS).
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	p := filepath.Join(n.backingPath(), name)
	_, statErr := os.Lstat(p)
	fd, err := syscall.Open(p, syscall.O_RDWR|syscall.O_CREAT|syscall.O_CLOEXEC, mode)
	if err != nil {
		return nil, nil, 0, fs.ToErrno(err)
	}
	syscall.Close(fd)
	ch, errno := n.Lookup(ctx, name, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if os.IsNotExist(statErr) {
		n.overlays.forget(ch.StableAttr())
	}
	o := n.overlays.get(ch.StableAttr())
	h, errno := openBacking(o, p, flags)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if size, ok := o.sizeOf(); ok {
		setSize(&out.Attr, size)
	}
	return ch, h, fuse.FOPEN_KEEP_CACHE, 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	h, _ := f.(*handle)
	return n.attr(ctx, h, out)
}

// Setattr takes a size change into the overlay and passes the rest (mode,
// owner, times) to the backing file.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	h, _ := f.(*handle)
	if size, ok := in.GetSize(); ok {
		fh := h
		if fh == nil {
			var errno syscall.Errno
			if fh, errno = openBacking(n.overlay(), n.backingPath(), 0); errno != 0 {
				return errno
			}
			defer fh.Release(ctx)
		}
		if errno := fh.o.truncate(fh.fd, int64(size)); errno != 0 {
			return errno
		}
		rest := *in
		rest.Valid &^= fuse.FATTR_SIZE
		in = &rest
	}
	if errno := n.LoopbackNode.Setattr(ctx, nil, in, out); errno != 0 {
		return errno
	}
	return n.attr(ctx, h, out)
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	ch := n.GetChild(name)
	errno := n.LoopbackNode.Unlink(ctx, name)
	if errno == 0 && ch != nil {
		n.overlays.forget(ch.StableAttr())
	}
	return errno
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	ch := newParent.EmbeddedInode().GetChild(newName)
	errno := n.LoopbackNode.Rename(ctx, name, newParent, newName, flags)
	if errno == 0 && ch != nil {
		n.overlays.forget(ch.StableAttr())
	}
	return errno
}

// handle is an open file: reads and writes go through its file's overlay.
type handle struct {
	o  *overlay
	fd int
}

var (
	_ fs.FileReader   = (*handle)(nil)
	_ fs.FileWriter   = (*handle)(nil)
	_ fs.FileFsyncer  = (*handle)(nil)
	_ fs.FileFlusher  = (*handle)(nil)
	_ fs.FileReleaser = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	b, errno := h.o.read(h.fd, dest, off)
	if errno != 0 {
		return nil, errno
	}
	return fuse.ReadResultData(b), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := h.o.write(h.fd, data, off); errno != 0 {
		return 0, errno
	}
	return uint32(len(data)), 0
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno { return h.o.sync(h.fd) }

// Flush (a close) makes nothing durable, as on a real disk.
func (h *handle) Flush(ctx context.Context) syscall.Errno { return 0 }

func (h *handle) Release(ctx context.Context) syscall.Errno {
	return fs.ToErrno(syscall.Close(h.fd))
}
