package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/sqlite/journal"
)

// healthEvery is how often the background check runs: /readyz answers
// from its last result, so a flood of probes costs an atomic load each,
// never the queue's writer connection nor a statfs.
const healthEvery = 2 * time.Second

// minFreeBytes is the free space under which the disk of a file counts as
// not writable: a commit needs room for its WAL frames.
const minFreeBytes = 16 << 20

// errNotReady is all /readyz tells: the reason, with file paths and free
// bytes, is for operators (admin socket `GET /v1/health`) and the log.
var errNotReady = errors.New("not ready")

// readyz is /readyz beyond draining: not stopping, and the last background
// check passed. It reads no file and takes no connection.
func (s *Server) readyz(context.Context) error {
	if s.stopping.Load() {
		return errors.New("stopping")
	}
	if h := s.health.Load(); h == nil || !h.Ready {
		return errNotReady
	}
	return nil
}

// runHealth checks the daemon's health every healthEvery until ctx ends,
// logging each change of readiness with its reason.
func (s *Server) runHealth(ctx context.Context) {
	t := time.NewTicker(healthEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		before := s.health.Load()
		h := s.checkHealth(ctx)
		s.health.Store(h)
		if before != nil && before.Ready != h.Ready {
			if h.Ready {
				s.log.Info().Msg("ready again")
			} else {
				s.log.Warn().Str("reason", h.Reason).Msg("not ready")
			}
		}
	}
}

// checkHealth is the full check: the queue file answers a write
// transaction, every disk holding a file has room, and the journal lock
// record is this process's.
func (s *Server) checkHealth(ctx context.Context) *admin.Health {
	h := &admin.Health{CheckedAt: time.Now().UTC(), Files: []admin.FileHealth{}}
	fail := func(format string, args ...any) *admin.Health {
		if h.Reason == "" {
			h.Reason = fmt.Sprintf(format, args...)
		}
		return h
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.store.Queue.Ping(pctx); err != nil {
		fail("queue: %v", err)
	}
	if s.cfg.Database != "" {
		// No files and no lock: the database answering is the check.
		h.Ready = h.Reason == ""
		return h
	}
	for _, f := range []struct{ role, path string }{{"queue", s.cfg.Queue}, {"state", s.cfg.State}, {"journal", s.cfg.Journal}} {
		if f.path == "" {
			continue
		}
		var fs syscall.Statfs_t
		if err := syscall.Statfs(filepath.Dir(f.path), &fs); err != nil {
			fail("disk of %s: %v", f.path, err)
			continue
		}
		free := fs.Bavail * uint64(fs.Bsize)
		abs, _ := filepath.Abs(f.path)
		h.Files = append(h.Files, admin.FileHealth{Role: f.role, Path: abs, FreeBytes: free})
		if free < minFreeBytes {
			fail("disk of %s: %d bytes free, under %d", abs, free, minFreeBytes)
		}
	}
	if s.cfg.Journal != "" {
		rec, err := journal.ReadLock(s.cfg.Journal)
		if err != nil || rec == nil || rec.PID != os.Getpid() {
			fail("journal lock is not held by this process")
		}
	}
	h.Ready = h.Reason == ""
	return h
}
