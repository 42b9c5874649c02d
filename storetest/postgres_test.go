package storetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/internal/uuidv7"
	"github.com/touba/touba-trigger/postgres"
	"github.com/touba/touba-trigger/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestPostgres runs the conformance suite against a fresh PostgreSQL
// database per test (skipped, saying so, without PostgreSQL 15).
func TestPostgres(t *testing.T) { storetest.Run(t, pgFactory{}) }

// pgFactory opens a node's stores on a test's database: Reopen is the same
// node restarted, OpenAgain another node.
type pgFactory struct{}

type pgOpened struct {
	url, node string
	opts      storetest.Options
	st        *postgres.Store
}

func (pgFactory) Open(t *testing.T, o storetest.Options) storetest.Stores {
	return openPG(t, pgtest.New(t), "node-"+uuidv7.New(), o)
}

func (pgFactory) Reopen(t *testing.T, old storetest.Stores) storetest.Stores {
	t.Helper()
	p := old.Private.(*pgOpened)
	if err := p.st.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return openPG(t, p.url, p.node, p.opts)
}

func (pgFactory) OpenAgain(t *testing.T, old storetest.Stores) storetest.Stores {
	p := old.Private.(*pgOpened)
	return openPG(t, p.url, "node-"+uuidv7.New(), p.opts)
}

func openPG(t *testing.T, url, node string, o storetest.Options) storetest.Stores {
	t.Helper()
	if o.LeaseTTL == 0 {
		// The suite's clock jumps by hours; only the take-over tests ask
		// for leases that expire within them.
		o.LeaseTTL = 10000 * time.Hour
	}
	var secrets secret.Set
	for _, s := range o.Secrets {
		secrets.Add(s)
	}
	var offset func() time.Duration
	if o.Now != nil {
		// The suite's clock drives the leases' expiry too: the
		// database's clock, shifted as far as the suite's jumped.
		offset = func() time.Duration { return time.Until(o.Now()) }
	}
	st, err := postgres.Open(context.Background(), postgres.Config{URL: url, NodeID: node, Now: o.Now, ClockOffset: offset,
		MaxPending: o.MaxPending, Secrets: &secrets, LogMaxRows: o.LogMaxRows, LogMaxAge: o.LogMaxAge, LeaseTTL: o.LeaseTTL,
		// Time partitions of 3 hours: the history tests' windows of a day
		// span several.
		History: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return storetest.Stores{Queue: st.Queue, State: st.State, Journal: st.Journal, PruneLog: st.State.Prune,
		History: st.History(), LeasesExpire: true, Private: &pgOpened{url: url, node: node, opts: o, st: st}}
}
