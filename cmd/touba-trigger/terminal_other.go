//go:build !linux

package main

import (
	"io"
	"os"
)

// isTerminal is false off Linux: console logs there carry no colours.
func isTerminal(io.Writer) bool { return false }

// isTTY is false off Linux: a question that needs an answer asks for
// --yes there instead.
func isTTY(*os.File) bool { return false }
