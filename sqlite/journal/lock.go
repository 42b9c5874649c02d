package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	touba "github.com/touba/touba-trigger"
)

// The lock (SPEC §5) is <journal>.lock: flock(LOCK_EX|LOCK_NB) on that file,
// and inside it a JSON record of the holder. The record is written into the
// locked file itself (truncate, write, fsync) rather than by rename: a
// rename would put a new inode at the path, and a second process would
// lock that one while the first still holds the old. Truncating first means
// a crash mid-write leaves an empty file (nothing to take over: the dead
// process had not used the journal yet) rather than a torn record.
//
// A clean release removes the file while still holding the flock. A process
// that opened the path just before the removal may then get the flock on
// the removed inode; so after every flock, the path must still name the
// locked file, or we open it again.

// LockRecord is the holder's record inside the lock file.
type LockRecord struct {
	PID       int       `json:"pid"`
	Host      string    `json:"host"`
	BootID    string    `json:"boot_id"`
	StartedAt time.Time `json:"started_at"`
	// ProcStart is the holder's start time as /proc/<pid>/stat gives it
	// (field 22, clock ticks since boot), so that a pid reused by another
	// process is not taken for the holder; 0 in records of older versions.
	ProcStart uint64 `json:"proc_start,omitempty"`
}

// String describes the holder for messages.
func (r LockRecord) String() string {
	return fmt.Sprintf("pid %d on host %s (boot %s), started %s", r.PID, r.Host, r.BootID, touba.FormatTime(r.StartedAt))
}

// LockOptions configures AcquireLock.
type LockOptions struct {
	// TakeOverStale allows replacing a record left by a dead process of this
	// host and this boot (--take-over-stale-lock).
	TakeOverStale bool
}

// Lock is a held journal lock.
type Lock struct {
	Path     string
	Record   LockRecord  // ours
	TookOver *LockRecord // the stale record replaced under TakeOverStale; nil otherwise

	f    *os.File
	once sync.Once
	err  error
}

// LockError is the error of a lock that cannot be taken or removed. It
// carries the public code (JournalLocked or JournalLockStale) and, when it
// could be read, the holder's record.
type LockError struct {
	Code   string
	Path   string
	Holder *LockRecord
	Reason string
}

// Error implements error.
func (e *LockError) Error() string { return e.message() }

// Unwrap gives errors.As the *touba.Error with the public code.
func (e *LockError) Unwrap() error { return &touba.Error{Code: e.Code, Message: e.message()} }

func (e *LockError) message() string {
	holder := "an unreadable record"
	if e.Holder != nil {
		holder = e.Holder.String()
	}
	if e.Code == touba.EJournalLocked {
		return fmt.Sprintf("effect journal lock %s is held by %s", e.Path, holder)
	}
	return fmt.Sprintf("effect journal lock %s was left by %s, a process that is no longer holding it; %s",
		e.Path, holder, e.Reason)
}

// LockPath is the lock file of the journal at journalPath.
func LockPath(journalPath string) string { return journalPath + ".lock" }

// AcquireLock takes the journal's lock for this process. A live holder is
// code JournalLocked; a record left by a process that died is code
// JournalLockStale, unless o.TakeOverStale is set and the record is of
// this host and this boot and its pid is gone: then Lock.TookOver holds it,
// for the caller to log. Nothing is ever taken over silently.
func AcquireLock(journalPath string, o LockOptions) (*Lock, error) {
	path := LockPath(journalPath)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("journal lock: %w", err)
	}
	f, err := lockFile(path, true)
	if err != nil {
		return nil, err
	}
	prev, err := readRecord(f)
	if err != nil {
		f.Close()
		return nil, &LockError{Code: touba.EJournalLockStale, Path: path,
			Reason: fmt.Sprintf("its record cannot be read (%v); inspect the host and remove the file by hand", err)}
	}
	if prev != nil {
		reason := "start with --take-over-stale-lock, or run `touba-trigger journal unlock`, after checking the host"
		if o.TakeOverStale {
			reason = staleRefusal(prev)
		}
		if !o.TakeOverStale || reason != "" {
			f.Close()
			return nil, &LockError{Code: touba.EJournalLockStale, Path: path, Holder: prev, Reason: reason}
		}
	}
	host, _ := os.Hostname()
	l := &Lock{Path: path, TookOver: prev, f: f,
		Record: LockRecord{PID: os.Getpid(), Host: host, BootID: bootID(), StartedAt: time.Now().UTC(), ProcStart: selfStart()}}
	if err := writeRecord(f, l.Record); err != nil {
		f.Close()
		return nil, fmt.Errorf("journal lock %s: %w", path, err)
	}
	return l, nil
}

// Release removes the record and drops the flock. It is idempotent.
func (l *Lock) Release() error {
	l.once.Do(func() {
		err := os.Remove(l.Path)
		if err == nil {
			err = syncDir(filepath.Dir(l.Path))
		}
		l.err = errors.Join(err, l.f.Close())
		if l.err != nil {
			l.err = fmt.Errorf("release journal lock: %w", l.err)
		}
	})
	return l.err
}

// ReadLock returns the record in the journal's lock file, or nil, nil when
// there is none. It does not tell whether the holder is alive.
func ReadLock(journalPath string) (*LockRecord, error) {
	f, err := os.Open(LockPath(journalPath))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("read journal lock: %w", err)
	}
	defer f.Close()
	return readRecord(f)
}

// Unlock removes a stale lock record (`touba-trigger journal unlock`) after
// the checks of a take-over: flock free, same host, same boot, pid gone. It
// returns the removed record, or nil when there was none.
func Unlock(journalPath string) (*LockRecord, error) {
	path := LockPath(journalPath)
	f, err := lockFile(path, false)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	defer f.Close()
	prev, err := readRecord(f)
	if err != nil {
		return nil, &LockError{Code: touba.EJournalLockStale, Path: path,
			Reason: fmt.Sprintf("its record cannot be read (%v); inspect the host and remove the file by hand", err)}
	}
	if prev != nil {
		if reason := staleRefusal(prev); reason != "" {
			return nil, &LockError{Code: touba.EJournalLockStale, Path: path, Holder: prev, Reason: reason}
		}
	}
	if err := os.Remove(path); err != nil {
		return nil, fmt.Errorf("journal unlock: %w", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("journal unlock: %w", err)
	}
	return prev, nil
}

// staleRefusal says why a record may not be taken over or removed, or ""
// when it is provably dead: this host, this boot, and no process that is
// its holder (holderAlive).
func staleRefusal(r *LockRecord) string {
	host, _ := os.Hostname()
	boot := bootID()
	switch {
	case r.Host != host:
		return fmt.Sprintf("refused: it was written on host %q, this is %q; check that host", r.Host, host)
	case boot == "":
		return "refused: this machine's boot id cannot be read, so the record cannot be proven stale"
	case r.BootID != boot:
		return fmt.Sprintf("refused: it was written in boot %s, this is boot %s; remove it by hand after checking", r.BootID, boot)
	case holderAlive(r):
		return fmt.Sprintf("refused: a process with pid %d is alive and may be its holder", r.PID)
	}
	return ""
}

// bootID is this boot's id, or "" where the kernel does not give one.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// lockFile opens path and takes its flock, retrying while the path was
// replaced under us (see the top of this file). A held flock is
// JournalLocked with the holder's record.
func lockFile(path string, create bool) (*os.File, error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	for range 100 {
		f, err := os.OpenFile(path, flags, 0o600)
		if err != nil {
			return nil, fmt.Errorf("journal lock: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			holder, _ := readRecord(f)
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, &LockError{Code: touba.EJournalLocked, Path: path, Holder: holder}
			}
			return nil, fmt.Errorf("journal lock %s: flock: %w", path, err)
		}
		fi, err1 := f.Stat()
		pi, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(fi, pi) {
			return f, nil
		}
		f.Close()
		if !create && errors.Is(err2, os.ErrNotExist) {
			return nil, fmt.Errorf("journal lock: %w", err2)
		}
	}
	return nil, fmt.Errorf("journal lock %s: the file keeps being replaced", path)
}

// readRecord reads the record of an open lock file; nil, nil when empty.
func readRecord(f *os.File) (*LockRecord, error) {
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<16))
	if err != nil {
		return nil, err
	}
	return parseRecord(b)
}

func parseRecord(b []byte) (*LockRecord, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, nil
	}
	var r LockRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("lock record: %w", err)
	}
	if r.PID <= 0 {
		return nil, fmt.Errorf("lock record: pid %d", r.PID)
	}
	return &r, nil
}

// writeRecord replaces the content of the locked file with r, durably.
func writeRecord(f *os.File, r LockRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt(append(b, '\n'), 0); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return syncDir(filepath.Dir(f.Name()))
}

// syncDir makes a file's creation or removal in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
