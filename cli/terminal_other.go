//go:build !linux

package cli

import (
	"io"
	"os"
)

// IsTerminal is false off Linux: console logs there carry no colours.
func IsTerminal(io.Writer) bool { return false }

// IsTTY is false off Linux: a question that needs an answer asks for
// --yes there instead.
func IsTTY(*os.File) bool { return false }
