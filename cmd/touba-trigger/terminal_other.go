//go:build !linux

package main

import "io"

// isTerminal is false off Linux: console logs there carry no colours.
func isTerminal(io.Writer) bool { return false }
