//go:build !linux

package handler_test

import "testing"

func useIsolationHelper(tb testing.TB) { tb.Skip("the isolation helper is Linux only") }
