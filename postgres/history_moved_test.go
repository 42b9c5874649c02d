package postgres

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// redos sums the optimistic batches st's writers ran again isolated.
func redos(st *Store) int64 {
	var n int64
	for _, w := range st.db.ws {
		n += w.Stats().Redos
	}
	return n
}

// holdMove moves the entries ids to the kept partitions with their rows
// in every kept table, as a pass's freeze does, in a transaction left
// open: the caller commits it.
func holdMove(t *testing.T, st *Store, ids []string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	pass, err := st.db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pass.Rollback(ctx) })
	for _, pt := range ptables {
		if pt.kept {
			if _, err := pass.Exec(ctx, `UPDATE touba.`+pt.name+` SET kept = true WHERE `+pt.key+` = ANY($1)`, ids); err != nil {
				t.Fatal(err)
			}
		}
	}
	return pass
}

// waitLocked waits until a statement of st's database whose text holds
// like waits for a lock.
func waitLocked(t *testing.T, st *Store, like string) {
	t.Helper()
	waitFor(t, 30*time.Second, func() bool {
		var n int
		err := st.db.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`, "%"+like+"%").Scan(&n)
		return err == nil && n > 0
	}, "a statement waiting on a moved row")
}

// A pass that moves running entries to the kept partitions (with their
// effects, runs and events) while a batch of their outcomes waits on their
// rows makes the batch's statement fail with 40001 ("tuple to be locked
// was already moved to another partition"): the batch runs again isolated,
// where each outcome's own statements find the moved rows. Every outcome
// is written once, moved or not: no error, each effect applied with the
// events of an unmoved one, and each entry ends done (issue 42).
func TestOutcomeBatchMeetsAMove(t *testing.T) {
	st, _ := deferStore(t)
	ctx := context.Background()
	ds := leaseAll(t, st, 8)
	hotSuffix(t, st, idsOf(ds))
	for i, err := range atOnce(len(ds), func(i int) error {
		_, err := st.Journal.PrepareDispatched(ctx, pdOf(ds[i], "call-1"))
		return err
	}) {
		if err != nil {
			t.Fatalf("prepare %d: %v", i, err)
		}
	}
	var moved []string
	for i, d := range ds {
		if i%2 == 0 {
			moved = append(moved, d.QueueID)
		}
	}
	// The pass's move, held open (as a freeze's transaction is while it
	// moves the rest of its range).
	pass := holdMove(t, st, moved)
	before := redos(st)
	done := make(chan []error, 1)
	go func() {
		done <- atOnce(len(ds), func(i int) error { return st.Journal.Finish(ctx, applied(ds[i], "call-1", i)) })
	}()
	// The outcomes' statement waits for the moved rows' locks.
	waitLocked(t, st, "effects")
	if err := pass.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for i, err := range <-done {
		if err != nil {
			t.Errorf("outcome %d (moved %v): %v", i, slices.Contains(moved, ds[i].QueueID), err)
		}
	}
	if redos(st) == before {
		t.Error("no batch ran again: the move did not meet the outcomes' statement")
	}
	want := eventStates(t, st, ds[1].QueueID, ds[1].QueueID+":s")
	for i, d := range ds {
		if got := eventStates(t, st, d.QueueID, d.QueueID+":s"); !slices.Equal(got, want) {
			t.Errorf("entry %d (moved %v): events %v, want %v", i, slices.Contains(moved, d.QueueID), got, want)
		}
	}
	for i, err := range atOnce(len(ds), func(i int) error {
		return st.Queue.Finish(ctx, ds[i].QueueID, ds[i].LeaseToken, touba.StatusDone, "", "")
	}) {
		if err != nil {
			t.Fatalf("end %d: %v", i, err)
		}
	}
	var kept, done2 int
	if err := st.db.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE e.kept), count(*) FILTER (WHERE e.status = 'done' AND x.state = 'applied')
		FROM touba.entries e JOIN touba.effects x ON x.scope = e.queue_id WHERE e.queue_id = ANY($1)`, idsOf(ds)).Scan(&kept, &done2); err != nil {
		t.Fatal(err)
	}
	if kept != len(moved) || done2 != len(ds) {
		t.Errorf("%d kept, %d done with their effect applied; want %d and %d", kept, done2, len(moved), len(ds))
	}
}

// A step's checkpoint whose lease check waits on a row a pass is moving
// to the kept partitions meets 40001 when the move commits: SaveStep
// tries again, and the checkpoint is written once, kept with its entry
// (issue 42). Before, the error failed the save.
func TestSaveStepMeetsAMove(t *testing.T) {
	st, _ := deferStore(t)
	ctx := context.Background()
	d := leaseAll(t, st, 1)[0]
	pass := holdMove(t, st, []string{d.QueueID})
	saved := make(chan error, 1)
	go func() { saved <- st.State.SaveStep(d.QueueID, d.LeaseToken, "s1", "run-1", json.RawMessage(`{"a":1}`)) }()
	waitLocked(t, st, "FOR SHARE")
	if err := pass.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-saved; err != nil {
		t.Fatalf("save step: %v", err)
	}
	var kept bool
	var n int
	if err := st.db.pool.QueryRow(ctx, `SELECT count(*), bool_and(kept) FROM touba.run_steps WHERE queue_id = $1`, d.QueueID).
		Scan(&n, &kept); err != nil || n != 1 || !kept {
		t.Fatalf("%d checkpoints (kept %v), %v; want one, kept", n, kept, err)
	}
}

// An outcome sharing its batch with an operation that may not be run
// again (a step's checkpoint) runs isolated from the start, nothing
// deferred: its own statement, waiting on a row a pass is moving to the
// kept partitions, meets 40001 when the move commits. The journal tries
// it again, and the outcome is written once (issue 42). Before, the
// error failed the outcome.
func TestIsolatedOutcomeMeetsAMove(t *testing.T) {
	url := pgtest.New(t)
	ctx := context.Background()
	st, err := Open(ctx, Config{URL: url, NodeID: "node-a", Writers: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ds := leaseAll(t, st, 3) // a is moved, x holds the writer, c shares a's batch
	a, x, c := ds[0], ds[1], ds[2]
	if _, err := st.Journal.PrepareDispatched(ctx, pdOf(a, "call-1")); err != nil {
		t.Fatal(err)
	}
	lock, err := st.db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Rollback(ctx) })
	if _, err := lock.Exec(ctx, `SELECT 1 FROM touba.entries WHERE queue_id = $1 FOR UPDATE`, x.QueueID); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 3)
	go func() { errs <- st.State.SaveStep(x.QueueID, x.LeaseToken, "s1", "run-1", json.RawMessage(`{}`)) }()
	waitLocked(t, st, "FOR SHARE") // the writer's batch waits on x
	pass := holdMove(t, st, []string{a.QueueID})
	finished := make(chan error, 1)
	go func() { finished <- st.Journal.Finish(ctx, applied(a, "call-1", 0)) }()
	go func() { errs <- st.State.SaveStep(c.QueueID, c.LeaseToken, "s1", "run-1", json.RawMessage(`{}`)) }()
	waitFor(t, 10*time.Second, func() bool { return st.db.w.Stats().Pending >= 3 }, "the outcome and c's step queued behind x's")
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitLocked(t, st, "effects") // the outcome, isolated, waits on a's rows
	if err := pass.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-finished; err != nil {
		t.Fatalf("outcome of the moved entry: %v", err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("step: %v", err)
		}
	}
	if got := eventStates(t, st, a.QueueID, a.QueueID+":s"); len(got) == 0 || got[len(got)-1] != touba.EffectApplied {
		t.Errorf("events of the moved entry's effect: %v, want it applied last", got)
	}
}
