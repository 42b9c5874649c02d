//go:build !linux

package admin

import "net"

// peerOf cannot read peer credentials portably outside Linux.
func peerOf(net.Conn) string { return "admin socket peer" }
