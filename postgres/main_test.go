package postgres

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/pgtest"
)

// historyChildEnv, set to a database URL, makes the test binary a node
// that runs one --history pass on it and exits (history_crash_test.go):
// its crash point kills it first.
const historyChildEnv = "TOUBA_PG_HISTORY_CHILD"

// purgeChildEnv, set beside it to a cutoff (Unix ms), makes the pass a
// retention pass with that cutoff.
const purgeChildEnv = "TOUBA_PG_PURGE_CUTOFF"

func TestMain(m *testing.M) {
	if url := os.Getenv(historyChildEnv); url != "" {
		os.Exit(historyChild(url))
	}
	pgtest.Main(m)
}

// historyChild opens url as node "child" at the clock and window its
// environment names and runs a pass; 3 when the pass ends (its crash
// point did not kill it).
func historyChild(url string) int {
	ms, _ := strconv.ParseInt(os.Getenv("TOUBA_PG_HISTORY_NOW"), 10, 64)
	window, _ := time.ParseDuration(os.Getenv("TOUBA_PG_HISTORY_WINDOW"))
	now := time.UnixMilli(ms)
	// A frozen child's transaction outlives the test's steps only if the
	// server's idle_in_transaction_session_timeout (--database-timeout)
	// does: TOUBA_PG_CHILD_TIMEOUT lengthens it.
	timeout, _ := time.ParseDuration(os.Getenv("TOUBA_PG_CHILD_TIMEOUT"))
	st, err := Open(context.Background(), Config{URL: url, NodeID: "child", Now: func() time.Time { return now }, History: window,
		Timeout: timeout})
	if c := os.Getenv(purgeChildEnv); err == nil && c != "" {
		// A retention pass instead (queue_purge_faults_test.go).
		ms, _ := strconv.ParseInt(c, 10, 64)
		_, err = st.Queue.purgePass(context.Background(), time.UnixMilli(ms))
	} else if err == nil {
		_, err = st.History().Prune(context.Background(), now.Add(-window))
	}
	fmt.Fprintf(os.Stderr, "child pass ended without its crash point: %v\n", err)
	return 3
}
