package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/pgtest"
)

// The operator actions' claims (admin/busy.go) hold across nodes: while
// node a's compensation holds an entry, node b's replay is told so, naming
// a; released, b takes it; a claim left by a process that died expires.
func TestOperatorClaimsAcrossNodes(t *testing.T) {
	url := pgtest.New(t)
	open := func(node string, ttl time.Duration) *Store {
		st, err := Open(context.Background(), Config{URL: url, NodeID: node, LeaseTTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	a, b := open("node-a", time.Minute), open("node-b", time.Minute)
	ctx := context.Background()
	if held, err := a.Claims.Claim(ctx, "q-1", "compensation"); err != nil || held != "" {
		t.Fatalf("a's claim: %q, %v", held, err)
	}
	if held, err := b.Claims.Claim(ctx, "q-1", "replay"); err != nil || !strings.Contains(held, "compensation") || !strings.Contains(held, "node-a") {
		t.Fatalf("b's claim while a holds it: %q, %v; want a's compensation named", held, err)
	}
	b.Claims.Release(ctx, "q-1") // not b's: changes nothing
	if held, _ := b.Claims.Claim(ctx, "q-1", "replay"); held == "" {
		t.Fatal("b's release freed a's claim")
	}
	a.Claims.Release(ctx, "q-1")
	if held, err := b.Claims.Claim(ctx, "q-1", "replay"); err != nil || held != "" {
		t.Fatalf("b's claim after a released: %q, %v", held, err)
	}
	// A claim whose holder never released it expires.
	short := open("node-c", time.Second)
	if held, _ := short.Claims.Claim(ctx, "q-2", "compensation"); held != "" {
		t.Fatal(held)
	}
	time.Sleep(1200 * time.Millisecond) // the claim's 1 s left to expire in real time
	if held, err := a.Claims.Claim(ctx, "q-2", "replay"); err != nil || held != "" {
		t.Fatalf("a's claim of an expired one: %q, %v", held, err)
	}
}
