//go:build linux

package admin

import (
	"fmt"
	"net"
	"syscall"
)

// peerOf names the process at the other end of an admin connection by its
// kernel-checked credentials (SO_PEERCRED), for the audit trail.
func peerOf(c net.Conn) string {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return "unknown"
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return "unknown"
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return "unknown"
	}
	return fmt.Sprintf("uid %d pid %d (admin socket)", cred.Uid, cred.Pid)
}
