package server

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Harden makes the process non-dumpable. It keeps processes of the same user, handlers first, out of
// the daemon: a non-dumpable process's /proc/<pid>/environ, mem, maps and
// fds are owned by root and ptrace is refused, so a handler cannot read the
// secrets of other bindings or the triggers' signing secrets there
// (SPEC §2.2). A handler's own exec resets the flag for itself. Root and
// CAP_SYS_PTRACE still can: that is what running handlers as another user
// is for (README, "What a handler can reach").
func Harden() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}
