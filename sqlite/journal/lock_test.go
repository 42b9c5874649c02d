package journal_test

import (
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/journal"
)

func mustAcquire(tb testing.TB, path string, o journal.LockOptions) *journal.Lock {
	tb.Helper()
	l, err := journal.AcquireLock(path, o)
	if err != nil {
		tb.Fatalf("acquire lock: %v", err)
	}
	tb.Cleanup(func() { l.Release() })
	return l
}

// lockHolder returns the holder record of a lock error, checking its code.
func lockHolder(tb testing.TB, err error, code string) *journal.LockRecord {
	tb.Helper()
	if got := touba.ErrorCode(err); got != code {
		tb.Fatalf("code=%s (%v), want %s", got, err, code)
	}
	var le *journal.LockError
	if !errors.As(err, &le) {
		tb.Fatalf("%v is not a *LockError", err)
	}
	return le.Holder
}

// deadChildRecord leaves a lock record by a child that took the lock and
// was SIGKILLed, and returns the child's pid.
func deadChildRecord(tb testing.TB, path string) int {
	tb.Helper()
	cmd, out := startChild(tb, "lock", path)
	line, err := out.ReadString('\n')
	if err != nil || line != "locked\n" {
		tb.Fatalf("child said %q (%v), want locked", line, err)
	}
	// While it lives, the lock is held.
	_, err = journal.AcquireLock(path, journal.LockOptions{TakeOverStale: true})
	if h := lockHolder(tb, err, touba.EJournalLocked); h == nil || h.PID != cmd.Process.Pid {
		tb.Fatalf("holder %+v, want pid %d", h, cmd.Process.Pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		tb.Fatal(err)
	}
	waitKilled(tb, cmd)
	return cmd.Process.Pid
}

// writeRecord forges a lock record.
func writeRecord(tb testing.TB, path string, r journal.LockRecord) {
	tb.Helper()
	b, _ := json.Marshal(r)
	if err := os.WriteFile(journal.LockPath(path), b, 0o600); err != nil {
		tb.Fatal(err)
	}
}

func TestLockHeldInProcess(t *testing.T) {
	path := journalPath(t)
	l := mustAcquire(t, path, journal.LockOptions{})
	if got, want := l.Record.PID, os.Getpid(); got != want {
		t.Fatalf("record pid=%d, want %d", got, want)
	}
	_, err := journal.AcquireLock(path, journal.LockOptions{TakeOverStale: true})
	h := lockHolder(t, err, touba.EJournalLocked)
	if h == nil || h.PID != os.Getpid() || !strings.Contains(err.Error(), strconv.Itoa(os.Getpid())) {
		t.Fatalf("error %v does not name the holder", err)
	}
	if _, err := journal.Unlock(path); touba.ErrorCode(err) != touba.EJournalLocked {
		t.Fatalf("unlock of a held lock: %v, want JournalLocked", err)
	}
	if r, err := journal.ReadLock(path); err != nil || r == nil || r.PID != os.Getpid() {
		t.Fatalf("read lock: %+v, %v", r, err)
	}
	// A clean release removes the record; the next start takes it quietly.
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(journal.LockPath(path)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock file after release: %v, want removed", err)
	}
	if l2 := mustAcquire(t, path, journal.LockOptions{}); l2.TookOver != nil {
		t.Fatalf("took over %+v after a clean release", l2.TookOver)
	}
}

func TestLockStaleFromKilledChild(t *testing.T) {
	path := journalPath(t)
	pid := deadChildRecord(t, path)

	_, err := journal.AcquireLock(path, journal.LockOptions{})
	h := lockHolder(t, err, touba.EJournalLockStale)
	if h == nil || h.PID != pid || h.BootID != journal.BootID() {
		t.Fatalf("stale holder %+v, want pid %d of this boot", h, pid)
	}
	if !strings.Contains(err.Error(), strconv.Itoa(pid)) {
		t.Fatalf("message %q does not name pid %d", err, pid)
	}
	// The refusal changed nothing.
	if r, err := journal.ReadLock(path); err != nil || r == nil || r.PID != pid {
		t.Fatalf("record after refusal: %+v, %v; want pid %d", r, err, pid)
	}

	l := mustAcquire(t, path, journal.LockOptions{TakeOverStale: true})
	if l.TookOver == nil || l.TookOver.PID != pid {
		t.Fatalf("took over %+v, want pid %d", l.TookOver, pid)
	}
	if r, err := journal.ReadLock(path); err != nil || r == nil || r.PID != os.Getpid() {
		t.Fatalf("record after take-over: %+v, %v; want ours", r, err)
	}
}

func TestLockRefusesWhatItCannotProveDead(t *testing.T) {
	host, _ := os.Hostname()
	path := journalPath(t)
	dead := deadChildRecord(t, path)
	tests := []struct {
		name string
		rec  journal.LockRecord
	}{
		{"other host", journal.LockRecord{PID: dead, Host: host + "-elsewhere", BootID: journal.BootID()}},
		{"other boot", journal.LockRecord{PID: dead, Host: host, BootID: "00000000-0000-0000-0000-000000000000"}},
		// Our parent is alive; a record with its start time, or an older
		// record (no start time) written after it started, may be its.
		{"live pid", journal.LockRecord{PID: os.Getppid(), Host: host, BootID: journal.BootID(), ProcStart: procStart(t, os.Getppid())}},
		{"live pid, older record", journal.LockRecord{PID: os.Getppid(), Host: host, BootID: journal.BootID()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.rec.StartedAt = time.Now().UTC()
			writeRecord(t, path, tt.rec)
			_, err := journal.AcquireLock(path, journal.LockOptions{TakeOverStale: true})
			if h := lockHolder(t, err, touba.EJournalLockStale); h == nil || *h != tt.rec {
				t.Fatalf("holder %+v, want %+v", h, tt.rec)
			}
			if !strings.Contains(err.Error(), "refused") {
				t.Fatalf("message %q does not say why", err)
			}
			_, err = journal.Unlock(path)
			lockHolder(t, err, touba.EJournalLockStale)
			if r, err := journal.ReadLock(path); err != nil || r == nil || *r != tt.rec {
				t.Fatalf("record after refusals: %+v, %v", r, err)
			}
		})
	}
	t.Run("unreadable", func(t *testing.T) {
		if err := os.WriteFile(journal.LockPath(path), []byte(`{"pid":`), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := journal.AcquireLock(path, journal.LockOptions{TakeOverStale: true})
		lockHolder(t, err, touba.EJournalLockStale)
		_, err = journal.Unlock(path)
		lockHolder(t, err, touba.EJournalLockStale)
	})
}

func TestUnlock(t *testing.T) {
	path := journalPath(t)
	if r, err := journal.Unlock(path); r != nil || err != nil {
		t.Fatalf("unlock with no lock file: %+v, %v; want nil, nil", r, err)
	}
	pid := deadChildRecord(t, path)
	r, err := journal.Unlock(path)
	if err != nil {
		t.Fatalf("unlock of a dead child's record: %v", err)
	}
	if r == nil || r.PID != pid {
		t.Fatalf("removed %+v, want pid %d", r, pid)
	}
	if r, err := journal.ReadLock(path); r != nil || err != nil {
		t.Fatalf("record after unlock: %+v, %v; want none", r, err)
	}
	if l := mustAcquire(t, path, journal.LockOptions{}); l.TookOver != nil {
		t.Fatalf("took over %+v after unlock", l.TookOver)
	}
}

func TestParseRecord(t *testing.T) {
	tests := []struct {
		in      string
		wantPID int
		wantErr bool
	}{
		{"", 0, false},
		{"  \n", 0, false},
		{`{"pid":12,"host":"h","boot_id":"b","started_at":"2026-01-02T03:04:05Z"}`, 12, false},
		{`{"pid":0,"host":"h"}`, 0, true},
		{`{"pid":-3}`, 0, true},
		{`{"pid":"12"}`, 0, true},
		{`{"pid":12`, 0, true},
		{`[]`, 0, true},
	}
	for _, tt := range tests {
		r, err := journal.ParseRecord([]byte(tt.in))
		if (err != nil) != tt.wantErr {
			t.Errorf("%q: error %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if pid := 0; r != nil {
			pid = r.PID
			if pid != tt.wantPID {
				t.Errorf("%q: pid=%d, want %d", tt.in, pid, tt.wantPID)
			}
		}
	}
}

func FuzzParseRecord(f *testing.F) {
	f.Add([]byte(`{"pid":12,"host":"h","boot_id":"b","started_at":"2026-01-02T03:04:05Z"}`))
	f.Add([]byte(`{"pid":1}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := journal.ParseRecord(b)
		if err != nil || r == nil {
			return
		}
		if r.PID <= 0 {
			t.Fatalf("accepted pid %d", r.PID)
		}
		// What parses survives a round trip.
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := journal.ParseRecord(again)
		if err != nil || r2 == nil || r2.PID != r.PID || r2.Host != r.Host || r2.BootID != r.BootID || !r2.StartedAt.Equal(r.StartedAt) {
			t.Fatalf("round trip of %+v: %+v, %v", r, r2, err)
		}
	})
}

func procStart(tb testing.TB, pid int) uint64 {
	tb.Helper()
	start, err := journal.ProcStart(pid)
	if err != nil || start == 0 {
		tb.Fatalf("start time of pid %d: %d, %v", pid, start, err)
	}
	return start
}

// A live pid is the holder only with the holder's start time, and our own
// pid is never it: in a container the daemon is pid 1 at every start, so
// after a kill -9 the record names the new daemon's own pid (issue 44).
func TestLockTakeOverReusedPID(t *testing.T) {
	host, _ := os.Hostname()
	self, parent := procStart(t, os.Getpid()), procStart(t, os.Getppid())
	tests := []struct {
		name string
		rec  journal.LockRecord
	}{
		{"our pid, another start", journal.LockRecord{PID: os.Getpid(), ProcStart: self + 1}},
		{"our pid, our start", journal.LockRecord{PID: os.Getpid(), ProcStart: self}},
		{"our pid, older record", journal.LockRecord{PID: os.Getpid()}},
		{"live pid, another start", journal.LockRecord{PID: os.Getppid(), ProcStart: parent + 1}},
		{"live pid, older record written before it started", journal.LockRecord{PID: os.Getppid(),
			StartedAt: time.Unix(1, 0).UTC()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, unlock := range []bool{false, true} {
				path := journalPath(t)
				tt.rec.Host, tt.rec.BootID = host, journal.BootID()
				if tt.rec.StartedAt.IsZero() {
					tt.rec.StartedAt = time.Now().UTC()
				}
				writeRecord(t, path, tt.rec)
				if unlock {
					if r, err := journal.Unlock(path); err != nil || r == nil || *r != tt.rec {
						t.Fatalf("unlock: %+v, %v; want %+v removed", r, err, tt.rec)
					}
					continue
				}
				if _, err := journal.AcquireLock(path, journal.LockOptions{}); touba.ErrorCode(err) != touba.EJournalLockStale {
					t.Fatalf("without --take-over-stale-lock: %v, want JournalLockStale", err)
				}
				l := mustAcquire(t, path, journal.LockOptions{TakeOverStale: true})
				if l.TookOver == nil || *l.TookOver != tt.rec {
					t.Fatalf("took over %+v, want %+v", l.TookOver, tt.rec)
				}
				if got, want := l.Record.ProcStart, self; got != want {
					t.Fatalf("our record's start=%d, want %d", got, want)
				}
			}
		})
	}
}

func TestParseProcStart(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"1 (touba-trigger) S 0 1 1 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 8 0 123456 0 0", 123456, false},
		{"77 (a) b) (c) R 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 42 9 9", 42, false},
		{"77 (x y) R 1 2 3", 0, true},
		{"no parenthesis", 0, true},
		{"7 (x) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 -5 0", 0, true},
	}
	for _, tt := range tests {
		got, err := journal.ParseProc(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("%q: %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
