//go:build !linux

package main

// makeNonDumpable does nothing where there is no PR_SET_DUMPABLE; the README
// says that only Linux keeps same-user handlers out of the daemon's memory.
func makeNonDumpable() error { return nil }
