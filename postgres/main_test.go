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
	st, err := Open(context.Background(), Config{URL: url, NodeID: "child", Now: func() time.Time { return now }, History: window})
	if err == nil {
		_, err = st.History().Prune(context.Background(), now.Add(-window))
	}
	fmt.Fprintf(os.Stderr, "child pass ended without its crash point: %v\n", err)
	return 3
}
