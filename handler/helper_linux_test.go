package handler_test

import (
	"testing"

	"github.com/touba/touba-trigger/handler"
)

// useIsolationHelper is handler.UseIsolationHelper where there is one.
func useIsolationHelper(tb testing.TB) { handler.UseIsolationHelper(tb) }
