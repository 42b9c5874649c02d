//go:build !linux

package server

// Harden does nothing where there is no PR_SET_DUMPABLE; the README
// says that only Linux keeps same-user handlers out of the daemon's memory.
func Harden() error { return nil }
