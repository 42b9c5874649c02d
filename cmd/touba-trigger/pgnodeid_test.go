package main_test

import (
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// SPEC §8: two nodes with the same --node-id cannot both run: the second
// refuses start-up, NodeIdInUse, exit 2, and the first goes on. The id of
// a node that died (SIGKILL, on this host and boot: its pid is gone) is
// free at once; that of a node stopped cleanly too.
func TestNodeIdInUse(t *testing.T) {
	dsn := pgtest.New(t)
	e := newOpEnv(t, opProgram, opManifest)
	start := func() *testkit.Daemon {
		return testkit.Start(t, nil, "serve", e.program, "--manifest", e.manifest, "--database", dsn, "--node-id", "dup",
			"--admin-socket", "", "--listen", "127.0.0.1:0", "--metrics-listen", "")
	}
	first := start()
	code, stderr := serveDB(t, e, dsn, "--node-id", "dup")
	if code != 2 || !strings.HasPrefix(stderr[strings.LastIndex(strings.TrimRight(stderr, "\n"), "\n")+1:], "NodeIdInUse: ") {
		t.Fatalf("second node with --node-id dup: exit %d, want 2 and NodeIdInUse\n%s", code, stderr)
	}
	if code := readyzCode(first.URL()); code != 200 {
		t.Fatalf("the first node's /readyz after the refusal: %d", code)
	}
	first.Kill()
	second := start() // the dead node's id: free
	second.Signal(syscall.SIGTERM)
	if code := second.Wait(opWait); code != 0 {
		t.Fatalf("node after SIGTERM: exit %d", code)
	}
	third := start() // stopped cleanly: free
	third.Kill()
}

func readyzCode(base string) int {
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
