package powerloss_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
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

const pageSize = 4096

// node is a loopback node with the overlay of its file.
type node struct {
	fs.LoopbackNode

	mu     sync.Mutex
	active bool             // the overlay holds unsynced changes
	size   int64            // logical size while active
	low    int64            // backing bytes at or past low are stale (truncated) while active
	pages  map[int64][]byte // dirty pages by index, pageSize bytes each
}

// newLazyFS returns the root node of a lazyFS over backing.
func newLazyFS(backing string) (*node, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		return nil, err
	}
	r := &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev)}
	r.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}}
	}
	root := &node{LoopbackNode: fs.LoopbackNode{RootData: r}}
	r.RootNode = root
	return root, nil
}

// backingPath is the file's path in the backing folder.
func (n *node) backingPath() string {
	return filepath.Join(n.RootData.Path, n.Path(n.RootData.RootNode.EmbeddedInode()))
}

// reset forgets the overlay: for a file just created or unlinked, whose
// inode number the backing folder may hand out again.
func (n *node) reset() {
	n.mu.Lock()
	n.active, n.pages = false, nil
	n.mu.Unlock()
}

// activate starts an overlay from the backing file's size. Holds n.mu.
func (n *node) activate(fd int) syscall.Errno {
	if n.active {
		return 0
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	n.active, n.size, n.low, n.pages = true, st.Size, st.Size, map[int64][]byte{}
	return 0
}

// view fills dest with the file's logical bytes at off (dest must lie
// within the logical size). Holds n.mu, active.
func (n *node) view(fd int, dest []byte, off int64) syscall.Errno {
	clear(dest)
	if valid := n.low - off; valid > 0 {
		if valid > int64(len(dest)) {
			valid = int64(len(dest))
		}
		if _, err := syscall.Pread(fd, dest[:valid], off); err != nil {
			return fs.ToErrno(err)
		}
	}
	for p := off / pageSize; p*pageSize < off+int64(len(dest)); p++ {
		page, ok := n.pages[p]
		if !ok {
			continue
		}
		start := max(off, p*pageSize)
		end := min(off+int64(len(dest)), (p+1)*pageSize)
		copy(dest[start-off:end-off], page[start-p*pageSize:end-p*pageSize])
	}
	return 0
}

func (n *node) read(fd int, dest []byte, off int64) ([]byte, syscall.Errno) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.active {
		k, err := syscall.Pread(fd, dest, off)
		if err != nil {
			return nil, fs.ToErrno(err)
		}
		return dest[:k], 0
	}
	if off >= n.size {
		return dest[:0], 0
	}
	dest = dest[:min(int64(len(dest)), n.size-off)]
	return dest, n.view(fd, dest, off)
}

func (n *node) write(fd int, data []byte, off int64) syscall.Errno {
	n.mu.Lock()
	defer n.mu.Unlock()
	if errno := n.activate(fd); errno != 0 {
		return errno
	}
	for p := off / pageSize; p*pageSize < off+int64(len(data)); p++ {
		page, ok := n.pages[p]
		if !ok {
			page = make([]byte, pageSize)
			if inFile := min(pageSize, n.size-p*pageSize); inFile > 0 {
				if errno := n.view(fd, page[:inFile], p*pageSize); errno != 0 {
					return errno
				}
			}
			n.pages[p] = page
		}
		start := max(off, p*pageSize)
		end := min(off+int64(len(data)), (p+1)*pageSize)
		copy(page[start-p*pageSize:end-p*pageSize], data[start-off:end-off])
	}
	n.size = max(n.size, off+int64(len(data)))
	return 0
}

func (n *node) truncate(fd int, size int64) syscall.Errno {
	n.mu.Lock()
	defer n.mu.Unlock()
	if errno := n.activate(fd); errno != 0 {
		return errno
	}
	if size < n.size {
		for p, page := range n.pages {
			if p*pageSize >= size {
				delete(n.pages, p)
			} else if size < (p+1)*pageSize {
				clear(page[size-p*pageSize:])
			}
		}
		n.low = min(n.low, size)
	}
	n.size = size
	return 0
}

// sync writes the overlay to the backing file: what an fsync makes durable.
func (n *node) sync(fd int) syscall.Errno {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.active {
		return 0
	}
	if err := syscall.Ftruncate(fd, n.low); err != nil {
		return fs.ToErrno(err)
	}
	for p, page := range n.pages {
		if end := min(pageSize, n.size-p*pageSize); end > 0 {
			if _, err := syscall.Pwrite(fd, page[:end], p*pageSize); err != nil {
				return fs.ToErrno(err)
			}
		}
	}
	if err := syscall.Ftruncate(fd, n.size); err != nil {
		return fs.ToErrno(err)
	}
	n.active, n.pages = false, nil
	return 0
}

// patch puts the logical size into attributes read from the backing file.
func (n *node) patch(a *fuse.Attr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.active {
		a.Size = uint64(n.size)
		a.Blocks = (a.Size + 511) / 512
	}
}

// openBacking opens the backing file read-write whatever the caller asked:
// an fsync through a read-only handle must still be able to write the
// overlay. O_TRUNC and O_APPEND are the overlay's business.
// path is the backing file's (a node being created is not in the tree
// yet, so it cannot find its own path).
func (n *node) openBacking(path string, flags uint32) (*handle, syscall.Errno) {
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	h := &handle{n: n, fd: fd}
	if flags&syscall.O_TRUNC != 0 {
		if errno := n.truncate(fd, 0); errno != 0 {
			syscall.Close(fd)
			return nil, errno
		}
	}
	return h, 0
}

var (
	_ fs.NodeOpener    = (*node)(nil)
	_ fs.NodeCreater   = (*node)(nil)
	_ fs.NodeGetattrer = (*node)(nil)
	_ fs.NodeSetattrer = (*node)(nil)
	_ fs.NodeUnlinker  = (*node)(nil)
	_ fs.NodeRenamer   = (*node)(nil)
)

// Open keeps the kernel's page cache across opens (FOPEN_KEEP_CACHE): every
// change goes through this mount, so the cache is never stale, and SQLite's
// mapped -shm pages are not dropped each time another connection opens it.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h, errno := n.openBacking(n.backingPath(), flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return h, fuse.FOPEN_KEEP_CACHE, 0
}

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
	child := ch.Operations().(*node)
	if os.IsNotExist(statErr) {
		child.reset()
	}
	h, errno := child.openBacking(p, flags)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	child.patch(&out.Attr)
	return ch, h, fuse.FOPEN_KEEP_CACHE, 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if h, ok := f.(*handle); ok {
		var st syscall.Stat_t
		if err := syscall.Fstat(h.fd, &st); err != nil {
			return fs.ToErrno(err)
		}
		out.FromStat(&st)
	} else if errno := n.LoopbackNode.Getattr(ctx, nil, out); errno != 0 {
		return errno
	}
	n.patch(&out.Attr)
	return 0
}

// Setattr takes a size change into the overlay and passes the rest (mode,
// owner, times) to the backing file.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		h, ok := f.(*handle)
		if !ok {
			var errno syscall.Errno
			if h, errno = n.openBacking(n.backingPath(), 0); errno != 0 {
				return errno
			}
			defer h.Release(ctx)
		}
		if errno := n.truncate(h.fd, int64(size)); errno != 0 {
			return errno
		}
		rest := *in
		rest.Valid &^= fuse.FATTR_SIZE
		in = &rest
	}
	if errno := n.LoopbackNode.Setattr(ctx, nil, in, out); errno != 0 {
		return errno
	}
	n.patch(&out.Attr)
	return 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if ch := n.GetChild(name); ch != nil {
		if c, ok := ch.Operations().(*node); ok {
			c.reset()
		}
	}
	return n.LoopbackNode.Unlink(ctx, name)
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if ch := newParent.EmbeddedInode().GetChild(newName); ch != nil {
		if c, ok := ch.Operations().(*node); ok {
			c.reset()
		}
	}
	return n.LoopbackNode.Rename(ctx, name, newParent, newName, flags)
}

// handle is an open file: reads and writes go through its node's overlay.
type handle struct {
	n  *node
	fd int
}

var (
	_ fs.FileReader    = (*handle)(nil)
	_ fs.FileWriter    = (*handle)(nil)
	_ fs.FileFsyncer   = (*handle)(nil)
	_ fs.FileFlusher   = (*handle)(nil)
	_ fs.FileReleaser  = (*handle)(nil)
	_ fs.FileGetattrer = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	b, errno := h.n.read(h.fd, dest, off)
	if errno != 0 {
		return nil, errno
	}
	return fuse.ReadResultData(b), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := h.n.write(h.fd, data, off); errno != 0 {
		return 0, errno
	}
	return uint32(len(data)), 0
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno { return h.n.sync(h.fd) }

// Flush (a close) makes nothing durable, as on a real disk.
func (h *handle) Flush(ctx context.Context) syscall.Errno { return 0 }

func (h *handle) Release(ctx context.Context) syscall.Errno {
	return fs.ToErrno(syscall.Close(h.fd))
}

func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.n.Getattr(ctx, h, out)
}
