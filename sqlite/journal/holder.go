package journal

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Whether the process named by a lock record is still its holder. The pid
// alone does not say: in a container the daemon is pid 1 at every start, so
// after a kill -9 the record names pid 1 and the new daemon, pid 1 too,
// would take itself for the holder; and any pid can be reused. So:
//
//   - the record's pid is ours: we are a new process (we hold the flock the
//     holder would hold), so it is not the holder;
//   - no process has the pid: not the holder;
//   - a process has it: it is the holder only if it started when the record
//     says. Records carry /proc/<pid>/stat's start time (ProcStart); older
//     ones do not, and then a process that started after the record was
//     written (StartedAt) cannot have written it.
//
// Anything that cannot be read counts as alive: a doubt is never taken as
// proof of death.

// userHZ is the unit of /proc/<pid>/stat's start time: USER_HZ, which the
// kernel's ABI fixes at 100 on every architecture Go supports on Linux.
const userHZ = 100

// holderAlive reports whether a process that may be r's holder exists.
func holderAlive(r *LockRecord) bool {
	if r.PID <= 0 {
		return true
	}
	if r.PID == os.Getpid() {
		return false
	}
	if err := syscall.Kill(r.PID, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	start, err := procStart(r.PID)
	if errors.Is(err, os.ErrNotExist) {
		return false // ended between the two looks
	} else if err != nil {
		return true
	}
	if r.ProcStart != 0 {
		return start == r.ProcStart
	}
	// An older record: the process is the holder only if it started no
	// later than the record was written (with a second's slack for the
	// tick and boot-time rounding).
	boot, err := bootTime()
	if err != nil || r.StartedAt.IsZero() {
		return true
	}
	started := boot.Add(time.Duration(start) * time.Second / userHZ)
	return !started.After(r.StartedAt.Add(time.Second))
}

// selfStart is this process's start time from /proc/self/stat, or 0.
func selfStart() uint64 {
	start, _ := procStart(os.Getpid())
	return start
}

// procStart reads field 22 (starttime, clock ticks since boot) of
// /proc/<pid>/stat. The second field, the command name, is in parentheses
// and may hold spaces and parentheses itself, so the fields are counted
// from the last ')'.
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseProcStart(string(b))
}

func parseProcStart(stat string) (uint64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("proc stat: no command name")
	}
	// After ')' come fields 3, 4, …; field 22 is the 20th of them.
	fields := strings.Fields(stat[i+1:])
	if len(fields) < 20 {
		return 0, errors.New("proc stat: too few fields")
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// bootTime is the system's boot time from /proc/stat's btime line.
func bootTime() (time.Time, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, err
			}
			return time.Unix(sec, 0), nil
		}
	}
	return time.Time{}, errors.New("proc stat: no btime")
}
