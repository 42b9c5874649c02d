//go:build linux

package admin

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// peer is the kernel-checked identity (SO_PEERCRED) of the process at the
// other end of an admin connection.
type peer struct {
	known    bool
	uid      uint32
	pid      int32
	checked  bool // the platform can read peer credentials
	describe string
}

// peerOf reads the credentials of the process at the other end of c.
func peerOf(c net.Conn) peer {
	p := peer{checked: true, describe: "unknown"}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return p
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return p
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return p
	}
	p.known, p.uid, p.pid = true, cred.Uid, cred.Pid
	p.describe = fmt.Sprintf("uid %d pid %d (admin socket)", cred.Uid, cred.Pid)
	return p
}

// allowedUID reports whether uid may use the admin socket: root, or the
// user the daemon runs as. The socket's mode (0600) says the same; this
// check holds even if the mode is widened by hand or the file is replaced.
func allowedUID(uid uint32, self int) bool { return uid == 0 || int64(uid) == int64(self) }

// allowed applies allowedUID to p; an unreadable credential is refused.
func (p peer) allowed() bool { return p.known && allowedUID(p.uid, os.Getuid()) }

// listenPrivate binds a unix socket under umask 0177, so the socket file
// is created 0600 and never exists with a wider mode, even for an
// instant. The umask is process-wide: the daemon binds the socket at
// start, before it creates anything else concurrently.
func listenPrivate(path string) (net.Listener, error) {
	old := syscall.Umask(0o177)
	defer syscall.Umask(old)
	return net.Listen("unix", path)
}
