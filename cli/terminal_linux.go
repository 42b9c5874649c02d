//go:build linux

package cli

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// IsTerminal reports whether w is a terminal: colours are for a person
// reading a terminal, and are escape codes in a file, a pipe or journald.
// NO_COLOR (no-color.org) turns them off even there.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// IsTTY reports whether f is a terminal, whatever NO_COLOR says: whether
// someone is there to answer a question.
func IsTTY(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
