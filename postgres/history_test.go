package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
)

// testClock is a node's clock that a test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// openNode opens a node's stores on url with --history window and the
// clock's time.
func openNode(t testing.TB, url, node string, clk *testClock, window time.Duration) *Store {
	t.Helper()
	st, err := Open(context.Background(), Config{URL: url, NodeID: node, Now: clk.Now, History: window, Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// ranEntries accepts n deliveries and runs each to status with a
// checkpoint, a run and an applied effect, as a run of one step does; it
// returns their queue ids.
func ranEntries(t testing.TB, st *Store, prefix string, n int, status string) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for i := range n {
		body := fmt.Sprintf(`{"n":%d}`, i)
		r, err := st.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: fmt.Sprintf("%s-%d", prefix, i),
			Digest: "d" + body, Body: []byte(body), RemoteAddr: "192.0.2.1:1"})
		if err != nil || !r.Created {
			t.Fatalf("enqueue: %+v, %v", r, err)
		}
		ids = append(ids, r.QueueID)
	}
	var leased []*touba.Delivery
	for len(leased) < n {
		got, err := st.Queue.Lease(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		leased = append(leased, got...)
	}
	for _, d := range leased {
		id := d.QueueID
		if err := st.State.SaveStep(id, d.LeaseToken, "s1", "run-"+id, json.RawMessage(`{}`)); err != nil {
			t.Fatal(err)
		}
		now := st.db.cfg.Now()
		st.State.RecordRun(&touba.Run{RunID: "run-" + id, QueueID: id, TriggerRef: "trigger:t", Attempt: 1, Status: status,
			StartedAt: now, EndedAt: &now})
		p := touba.EffectPrepare{Scope: id, EffectID: id + ":s1", ToolRef: "tool:t", Operation: touba.OperationInvoke,
			Fingerprint: "sha256:00", RetryMode: touba.RetryIdempotencyKey, CallID: "c" + id, LeaseToken: d.LeaseToken}
		if _, err := st.Journal.Prepare(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := st.Journal.Dispatch(ctx, id, id+":s1", "c"+id); err != nil {
			t.Fatal(err)
		}
		if err := st.Journal.Finish(ctx, touba.EffectOutcome{Scope: id, EffectID: id + ":s1", CallID: "c" + id,
			State: touba.EffectApplied, ReceiptRef: "r", Result: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
		code := ""
		if status == touba.StatusParked {
			code = touba.EEffectReconciliationRequired
		}
		if err := st.Queue.Finish(ctx, id, d.LeaseToken, status, code, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.State.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return ids
}

// count is a number the query returns.
func count(t testing.TB, conn *pgx.Conn, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// halfForgotten counts what refers to an entry that is gone: runs,
// checkpoints, effects and their events (SPEC §8.1: nothing
// half-forgotten).
func halfForgotten(t testing.TB, conn *pgx.Conn) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, tk := range []struct{ table, key string }{{"runs", "queue_id"}, {"run_steps", "queue_id"}, {"effects", "scope"},
		{"effect_events", "scope"}} {
		if n := count(t, conn, fmt.Sprintf(`SELECT count(*) FROM touba.%[1]s x
			WHERE NOT EXISTS (SELECT 1 FROM touba.entries e WHERE e.queue_id = x.%[2]s)`, tk.table, tk.key)); n > 0 {
			out[tk.table] = n
		}
	}
	return out
}

// leafNames lists the time partitions of every table.
func leafNames(t testing.TB, conn *pgx.Conn) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, tb := range ptables {
		ls, err := leaves(context.Background(), conn, tb.rangeParent())
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			out[l.name] = true
		}
	}
	return out
}

// SPEC §8.1: a range past --history goes by DROP, no DELETE of its rows:
// the database's count of deleted rows grows by the rows moved to the
// kept partitions only (a row moved is deleted from its partition), the
// partitions that held the forgotten entries are gone, and the failed and
// parked entries stay, with their checkpoints and effects, as does an
// entry within the window.
func TestPartitionsDroppedNotDeleted(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t)
	clk := &testClock{t: time.Now()}
	window := 80 * time.Second
	st := openNode(t, url, "n1", clk, window)
	done := ranEntries(t, st, "done", 30, touba.StatusDone)
	failed := ranEntries(t, st, "failed", 2, touba.StatusFailed)
	parked := ranEntries(t, st, "parked", 2, touba.StatusParked)
	clk.Add(3 * window)
	recent := ranEntries(t, st, "recent", 3, touba.StatusDone)
	conn := superConn(t, url)
	// Every row deleted from a partitioned table, whatever partition it
	// was in, is counted: a row trigger on each table is on all its
	// partitions, those created later included.
	mustExec(t, conn, `CREATE TABLE public.deleted_rows (tbl text);
		CREATE FUNCTION public.count_delete() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO public.deleted_rows VALUES (TG_TABLE_NAME); RETURN NULL; END $$`)
	for _, tb := range ptables {
		mustExec(t, conn, `CREATE TRIGGER count_delete AFTER DELETE ON touba.`+tb.name+` FOR EACH ROW EXECUTE FUNCTION public.count_delete()`)
	}
	deleted := func() int64 { return count(t, conn, `SELECT count(*) FROM public.deleted_rows`) }
	before, leavesBefore := deleted(), leafNames(t, conn)

	rep, err := st.History().Prune(ctx, clk.Now().Add(-window))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Entries != 30 || rep.Partitions == 0 {
		t.Fatalf("pass: %+v, want the 30 done entries forgotten by dropping partitions", rep)
	}
	var moved int64
	for _, tb := range ptables[:5] {
		moved += count(t, conn, `SELECT count(*) FROM touba.`+tb.name+`_kept`)
	}
	if got := deleted() - before; got != moved {
		t.Fatalf("%d rows deleted during the pass, want %d: those moved to the kept partitions, no forgotten row", got, moved)
	}
	gone := 0
	for name := range leavesBefore {
		if !leafNames(t, conn)[name] {
			gone++
			if n := count(t, conn, `SELECT count(*) FROM pg_class WHERE relname = $1`, name); n != 0 {
				t.Fatalf("partition %s detached but not dropped", name)
			}
		}
	}
	if gone != rep.Partitions {
		t.Fatalf("%d partitions gone, report says %d", gone, rep.Partitions)
	}
	for _, id := range done {
		if d, err := st.Queue.Get(ctx, id); err != nil || d != nil {
			t.Fatalf("forgotten entry %s: %+v (%v)", id, d, err)
		}
	}
	for _, id := range append(append(failed, parked...), recent...) {
		d, err := st.Queue.Get(ctx, id)
		if err != nil || d == nil {
			t.Fatalf("kept entry %s: %v (%v)", id, d, err)
		}
		if steps, err := st.State.Steps(ctx, id); err != nil || len(steps) != 1 {
			t.Fatalf("checkpoints of kept %s: %v (%v)", id, steps, err)
		}
		if e, err := st.Journal.Get(ctx, id, id+":s1"); err != nil || e == nil || e.State != touba.EffectApplied {
			t.Fatalf("effect of kept %s: %+v (%v)", id, e, err)
		}
		if ev, err := st.Journal.Events(ctx, id, id+":s1"); err != nil || len(ev) != 3 {
			t.Fatalf("events of kept %s: %d (%v)", id, len(ev), err)
		}
	}
	if h := halfForgotten(t, conn); len(h) > 0 {
		t.Fatalf("half-forgotten rows: %v", h)
	}
	// Past the window a redelivery is a new delivery; within it, not.
	r, err := st.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: "done-0", Digest: `d{"n":0}`, Body: []byte(`{"n":0}`)})
	if err != nil || !r.Created {
		t.Fatalf("redelivery past the window: %+v, %v; want a new entry", r, err)
	}
	r, err = st.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: "recent-0", Digest: `d{"n":0}`, Body: []byte(`{"n":0}`)})
	if err != nil || r.Created || r.QueueID != recent[0] {
		t.Fatalf("redelivery within the window: %+v, %v; want entry %s", r, err, recent[0])
	}
}

// An identity is unique across partitions: two nodes whose clocks put
// the same delivery on either side of a partition bound, at once, make
// one entry; and a redelivery whose id falls in a later partition finds
// the entry of an earlier one.
func TestIdentityAcrossPartitions(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t)
	left, right := &testClock{t: time.Now()}, &testClock{t: time.Now()}
	a := openNode(t, url, "a", left, 8*time.Second)
	b := openNode(t, url, "b", right, 8*time.Second)
	// The bound: where the new database's <t>_old ends and its first time
	// partition begins.
	ls, err := leaves(ctx, a.db.pool, "entries_live")
	if err != nil {
		t.Fatal(err)
	}
	var bound time.Time
	for _, l := range ls {
		if l.name == "entries_old" {
			bound = time.UnixMilli(l.to)
		}
	}
	left.t, right.t = bound.Add(-time.Millisecond), bound.Add(time.Millisecond)
	if _, _, err := a.db.ensureAhead(ctx, PartitionWidth(80*time.Second)); err != nil {
		t.Fatal(err)
	}
	const n = 40
	conn := superConn(t, url)
	// Rounds until both sides won some identities (which side wins each
	// is the race's): every round, each identity makes one entry. Under a
	// loaded CI one node's batches came first in five rounds running.
	const rounds = 25
	for round := 0; count(t, conn, `SELECT count(DISTINCT tableoid) FROM touba.entries`) < 2; round++ {
		if round == rounds {
			t.Fatalf("%d rounds and one side won every identity: the race across the bound never ran", rounds)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 2*n)
		for i := range n {
			for _, st := range []*Store{a, b} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					d := &touba.Delivery{TriggerRef: "trigger:t", EventID: fmt.Sprintf("ev-%d-%d", round, i), Digest: "d", Body: []byte(`{}`)}
					if _, err := st.Queue.Enqueue(ctx, d); err != nil {
						errs <- err
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if got, want := count(t, conn, `SELECT count(*) FROM touba.entries`), int64(n*(round+1)); got != want {
			t.Fatalf("%d entries for %d identities delivered twice across a partition bound", got, want)
		}
	}
	right.Add(3 * time.Second)
	r, err := b.Queue.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:t", EventID: "ev-0-0", Digest: "d", Body: []byte(`{}`)})
	if err != nil || r.Created {
		t.Fatalf("redelivery a partition later: %+v, %v; want the existing entry", r, err)
	}
}

// The storage report of a partitioned database: each table's size with
// its partitions, the oldest entries, and what a pass would drop.
func TestStorageReportsPartitions(t *testing.T) {
	ctx := context.Background()
	url := pgtest.New(t)
	clk := &testClock{t: time.Now()}
	st := openNode(t, url, "n1", clk, 80*time.Second)
	ranEntries(t, st, "e", 5, touba.StatusDone)
	clk.Add(300 * time.Second)
	if _, _, err := st.db.ensureAhead(ctx, PartitionWidth(80*time.Second)); err != nil {
		t.Fatal(err)
	}
	rep, err := st.History().Storage(ctx, clk.Now().Add(-80*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Backend != "postgres" || rep.Note != "" || rep.OldestEntry == nil || rep.OldestFinished == nil || rep.Forgettable != 5 || rep.Partitions == 0 {
		t.Fatalf("report: %+v", rep)
	}
	sizes := map[string]touba.StorageSize{}
	for _, s := range rep.Sizes {
		sizes[s.Name] = s
	}
	for _, tb := range ptables {
		if s := sizes[tb.name]; s.Bytes <= 0 || s.Partitions < 3 || s.Kind != "table" {
			t.Fatalf("%s: %+v, want its size and time partitions", tb.name, s)
		}
	}
}
