package powerloss_test

import (
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
)

const pageSize = 4096

// overlay is what a file's unsynced writes and truncates did: while
// active, the file's content is the backing file's first low bytes, then
// zeros up to size, with the dirty pages laid over it.
type overlay struct {
	mu     sync.Mutex
	active bool             // there are unsynced changes
	size   int64            // logical size while active
	low    int64            // backing bytes at or past low are stale (truncated) while active
	pages  map[int64][]byte // dirty pages by index, pageSize bytes each
}

// overlays are the overlays of one mount by file identity (inode number
// and birth time), not by go-fuse node: the kernel may forget a closed
// file's node while its writes are still unsynced.
type overlays struct {
	mu    sync.Mutex
	files map[fs.StableAttr]*overlay
}

func (m *overlays) get(id fs.StableAttr) *overlay {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.files[id]
	if o == nil {
		o = &overlay{}
		m.files[id] = o
	}
	return o
}

// forget drops a file's overlay: it was unlinked, or is a new file whose
// inode number the backing folder handed out again.
func (m *overlays) forget(id fs.StableAttr) {
	m.mu.Lock()
	delete(m.files, id)
	m.mu.Unlock()
}

// activate starts an overlay from the backing file's size. Holds o.mu.
func (o *overlay) activate(fd int) syscall.Errno {
	if o.active {
		return 0
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	o.active, o.size, o.low, o.pages = true, st.Size, st.Size, map[int64][]byte{}
	return 0
}

// view fills dest with the file's logical bytes at off (dest must lie
// within the logical size). Holds o.mu, active.
func (o *overlay) view(fd int, dest []byte, off int64) syscall.Errno {
	clear(dest)
	if valid := o.low - off; valid > 0 {
		if valid > int64(len(dest)) {
			valid = int64(len(dest))
		}
		if _, err := syscall.Pread(fd, dest[:valid], off); err != nil {
			return fs.ToErrno(err)
		}
	}
	for p := off / pageSize; p*pageSize < off+int64(len(dest)); p++ {
		page, ok := o.pages[p]
		if !ok {
			continue
		}
		start := max(off, p*pageSize)
		end := min(off+int64(len(dest)), (p+1)*pageSize)
		copy(dest[start-off:end-off], page[start-p*pageSize:end-p*pageSize])
	}
	return 0
}

func (o *overlay) read(fd int, dest []byte, off int64) ([]byte, syscall.Errno) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.active {
		k, err := syscall.Pread(fd, dest, off)
		if err != nil {
			return nil, fs.ToErrno(err)
		}
		return dest[:k], 0
	}
	if off >= o.size {
		return dest[:0], 0
	}
	dest = dest[:min(int64(len(dest)), o.size-off)]
	return dest, o.view(fd, dest, off)
}

func (o *overlay) write(fd int, data []byte, off int64) syscall.Errno {
	o.mu.Lock()
	defer o.mu.Unlock()
	if errno := o.activate(fd); errno != 0 {
		return errno
	}
	for p := off / pageSize; p*pageSize < off+int64(len(data)); p++ {
		page, ok := o.pages[p]
		if !ok {
			page = make([]byte, pageSize)
			if inFile := min(pageSize, o.size-p*pageSize); inFile > 0 {
				if errno := o.view(fd, page[:inFile], p*pageSize); errno != 0 {
					return errno
				}
			}
			o.pages[p] = page
		}
		start := max(off, p*pageSize)
		end := min(off+int64(len(data)), (p+1)*pageSize)
		copy(page[start-p*pageSize:end-p*pageSize], data[start-off:end-off])
	}
	o.size = max(o.size, off+int64(len(data)))
	return 0
}

func (o *overlay) truncate(fd int, size int64) syscall.Errno {
	o.mu.Lock()
	defer o.mu.Unlock()
	if errno := o.activate(fd); errno != 0 {
		return errno
	}
	if size < o.size {
		for p, page := range o.pages {
			if p*pageSize >= size {
				delete(o.pages, p)
			} else if size < (p+1)*pageSize {
				clear(page[size-p*pageSize:])
			}
		}
		o.low = min(o.low, size)
	}
	o.size = size
	return 0
}

// sync writes the overlay to the backing file: what an fsync makes durable.
func (o *overlay) sync(fd int) syscall.Errno {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.active {
		return 0
	}
	if err := syscall.Ftruncate(fd, o.low); err != nil {
		return fs.ToErrno(err)
	}
	for p, page := range o.pages {
		if end := min(pageSize, o.size-p*pageSize); end > 0 {
			if _, err := syscall.Pwrite(fd, page[:end], p*pageSize); err != nil {
				return fs.ToErrno(err)
			}
		}
	}
	if err := syscall.Ftruncate(fd, o.size); err != nil {
		return fs.ToErrno(err)
	}
	o.active, o.pages = false, nil
	return 0
}

// sizeOf returns the logical size, if the overlay is active.
func (o *overlay) sizeOf() (int64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.size, o.active
}
