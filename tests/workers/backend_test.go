package workers_test

import (
	"context"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/postgres"
)

// The backends every case runs on: the SQLite files, and one PostgreSQL
// database (a throwaway cluster of internal/pgtest).
const (
	sqliteBackend = "sqlite"
	pgBackend     = "postgres"
)

// eachBackend runs f as a subtest per backend; the PostgreSQL one skips,
// saying why, where PostgreSQL 15 is not installed.
func eachBackend(t *testing.T, f func(t *testing.T, backend string)) {
	for _, b := range []string{sqliteBackend, pgBackend} {
		t.Run(b, func(t *testing.T) {
			if b == pgBackend {
				if ok, why := pgtest.Available(); !ok {
					t.Skip("PostgreSQL 15 not installed: " + why)
				}
			}
			f(t, b)
		})
	}
}

// storageArgs are serve's storage flags: the SQLite files, or the
// database with node as the node's id.
func (w *world) storageArgs(node string) []string {
	if w.db != "" {
		return []string{"--database", w.db, "--node-id", node}
	}
	return []string{"--queue", w.queue, "--state", w.state, "--effect-journal", w.journal, "--take-over-stale-lock"}
}

// pgStore opens the database as an onlooker: no recovery, no requeue, no
// node registered, so it can read while the nodes run.
func (w *world) pgStore() *postgres.Store {
	w.t.Helper()
	st, err := postgres.Open(context.Background(), postgres.Config{URL: w.db, NodeID: "test-reader", MaxConns: 2})
	if err != nil {
		w.t.Fatal(err)
	}
	return st
}

// entries reads every entry, oldest first; on SQLite of a stopped daemon
// only (opening the file migrates it).
func (w *world) entries() []*touba.Delivery {
	w.t.Helper()
	if w.db == "" {
		return testkit.Entries(w.t, w.queue)
	}
	st := w.pgStore()
	defer st.Close()
	all, err := st.Queue.List(context.Background(), touba.EntryFilter{Limit: 1 << 30})
	if err != nil {
		w.t.Fatal(err)
	}
	return all
}

// effects reads every effect and each one's audit trail by effect id; on
// SQLite of a stopped daemon only (the journal lock keeps others off).
func (w *world) effects() ([]touba.Effect, map[string][]touba.EffectEvent) {
	w.t.Helper()
	if w.db == "" {
		return testkit.Effects(w.t, w.journal)
	}
	st := w.pgStore()
	defer st.Close()
	ctx := context.Background()
	all, err := st.Journal.List(ctx, touba.EffectFilter{})
	if err != nil {
		w.t.Fatal(err)
	}
	events := map[string][]touba.EffectEvent{}
	for _, e := range all {
		if events[e.EffectID], err = st.Journal.Events(ctx, e.Scope, e.EffectID); err != nil {
			w.t.Fatal(err)
		}
	}
	return all, events
}

// entryError is the error code of entry id.
func (w *world) entryError(id string) string {
	w.t.Helper()
	if w.db == "" {
		code, _ := testkit.EntryError(w.t, w.queue, id)
		return code
	}
	for _, e := range w.entries() {
		if e.QueueID == id {
			return e.ErrorCode
		}
	}
	w.t.Fatalf("no entry %s", id)
	return ""
}
