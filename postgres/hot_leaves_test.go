package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// hotSuffix waits for the partition cache to know the partition of ids.
func hotSuffix(t *testing.T, st *Store, ids []string) string {
	t.Helper()
	var s string
	waitFor(t, 10*time.Second, func() bool { s = st.db.hot.suffix(ids); return s != "" }, "the partition cache")
	return s
}

func idsOf(ds []*touba.Delivery) []string {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.QueueID
	}
	return ids
}

// runAll runs each entry's prepare-and-dispatch, outcome and end at once
// (so that each kind shares a flush, deferred) and checks that every one
// ends done with its effect applied.
func runAll(t *testing.T, st *Store, ds []*touba.Delivery) {
	t.Helper()
	ctx := context.Background()
	steps := []func(i int) error{
		func(i int) error { _, err := st.Journal.PrepareDispatched(ctx, pdOf(ds[i], "call-1")); return err },
		func(i int) error { return st.Journal.Finish(ctx, applied(ds[i], "call-1", i)) },
		func(i int) error {
			return st.Queue.Finish(ctx, ds[i].QueueID, ds[i].LeaseToken, touba.StatusDone, "", "")
		},
	}
	for s, step := range steps {
		for i, err := range atOnce(len(ds), step) {
			if err != nil {
				t.Fatalf("step %d, entry %d: %v", s, i, err)
			}
		}
	}
	for i, d := range ds {
		var status, state string
		if err := st.db.pool.QueryRow(ctx, `SELECT e.status, x.state FROM touba.entries e JOIN touba.effects x ON x.scope = e.queue_id
			WHERE e.queue_id = $1`, d.QueueID).Scan(&status, &state); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if status != touba.StatusDone || state != touba.EffectApplied {
			t.Errorf("entry %d: %s with its effect %s, want done and applied", i, status, state)
		}
	}
}

// A batch's statements run against the time partition its ids fall in;
// an entry that is not there (moved to entries_kept by a pass, as a
// freeze does) is written by its operation's own statements on the parent
// table: every prepare, outcome and end of both kinds of entries lands,
// and only the moved entries' rows took that path.
func TestBatchOnPartitionWritesMovedEntries(t *testing.T) {
	st, _ := deferStore(t)
	ctx := context.Background()
	ds := leaseAll(t, st, 8)
	suffix := hotSuffix(t, st, idsOf(ds))
	var moved []string
	for i, d := range ds {
		if i%2 == 0 {
			moved = append(moved, d.QueueID)
		}
	}
	if _, err := st.db.pool.Exec(ctx, `UPDATE touba.entries SET kept = true WHERE queue_id = ANY($1)`, moved); err != nil {
		t.Fatal(err)
	}
	slow := st.db.deferred.slow.Load()
	runAll(t, st, ds)
	// Each moved entry's prepare, outcome and end: three rows each took
	// the parent's statements; the others none.
	if got, want := st.db.deferred.slow.Load()-slow, int64(3*len(moved)); got != want {
		t.Errorf("%d rows took their operation's own statements, want %d (the moved entries' three each)", got, want)
	}
	var kept, there int
	if err := st.db.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM touba.entries_kept WHERE status = 'done'),
		(SELECT count(*) FROM touba.entries`+suffix+` WHERE status = 'done')`).Scan(&kept, &there); err != nil {
		t.Fatal(err)
	}
	if kept != len(moved) || there != len(ds)-len(moved) {
		t.Errorf("done: %d kept, %d in entries%s; want %d and %d", kept, there, suffix, len(moved), len(ds)-len(moved))
	}
}

// A cache naming a partition that is gone (dropped by another node's
// pass) fails the flush, which runs again isolated on the parent tables:
// nothing is lost, and the cache reads the partitions again.
func TestBatchOnDroppedPartitionRunsAgain(t *testing.T) {
	st, _ := deferStore(t)
	ds := leaseAll(t, st, 6)
	hotSuffix(t, st, idsOf(ds))
	h := st.db.hot
	h.mu.Lock()
	h.list = []hotLeaf{{from: minMS, to: maxMS, suffix: "_p19700101t000000000"}}
	h.at, h.tried = time.Now(), time.Now()
	h.mu.Unlock()
	if s := h.suffix(idsOf(ds)); s != "_p19700101t000000000" {
		t.Fatalf("suffix %q, want the planted one", s)
	}
	runAll(t, st, ds)
	h.mu.RLock()
	stale := h.at.IsZero() || len(h.list) == 0 || h.list[0].suffix != "_p19700101t000000000"
	h.mu.RUnlock()
	if !stale {
		t.Error("the cache still names the dropped partition as fresh")
	}
}

// The statement on a partition names only the tables the batch reads by
// key there; inserts go through the parent (its routing checks the bound).
func TestOnPartitionNamesOnlyKeyedTables(t *testing.T) {
	st, _ := deferStore(t)
	h := st.db.hot
	for _, sql := range []string{st.Journal.prepareDispatchedMany(), finishMany, endMany} {
		got := h.on(sql, "_pX")
		if strings.Count(got, "touba.entries_pX e") == 0 {
			t.Errorf("no entries_pX in %s", got)
		}
		if strings.Contains(got, "touba.effects_pX (") || strings.Contains(got, "effect_events_pX") {
			t.Errorf("an insert names the partition: %s", got)
		}
		if strings.Contains(got, "touba.entries e") || strings.Contains(got, "touba.effects x") {
			t.Errorf("a keyed read left on the parent: %s", got)
		}
	}
	if got := h.on(endMany, ""); got != endMany {
		t.Error("no partition: the statement changed")
	}
}

// The end of a batch finds its entries by key, whatever the statistics
// say: analyzed while every entry was pending (as after a burst of
// intake), they made the planner read every running entry through the
// status index for each batch (466 rows for 25, issue 42). With 300
// running among 20,000 finished, the end of 25 reads a few rows per
// entry, under a generic plan.
func TestBatchEndReadsOnlyItsRows(t *testing.T) {
	st, _ := deferStore(t)
	ctx := context.Background()
	for i := range 400 {
		d := &touba.Delivery{TriggerRef: "trigger:t", EventID: fmt.Sprintf("e-%d", i), Digest: "d", Body: []byte(`{}`)}
		if _, err := st.Queue.Enqueue(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	// 20,000 finished entries beside them in the partition, as a day
	// of history; analyzed before any entry runs.
	setup, err := st.db.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Release()
	for _, s := range []string{`SET statement_timeout = 0`, `INSERT INTO touba.entries
		SELECT (jsonb_populate_record(e, jsonb_build_object('queue_id', left(e.queue_id, 24) || lpad(to_hex(g), 12, '0'),
			'event_id', 'h-' || g, 'status', 'done'))).*
		FROM touba.entries e, generate_series(1, 20000) g WHERE e.event_id = 'e-0'`, `ANALYZE touba.entries`} {
		if _, err := setup.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	ds, err := st.Queue.Lease(ctx, 300)
	if err != nil || len(ds) != 300 {
		t.Fatalf("lease: %d, %v", len(ds), err)
	}
	ds = ds[:25]
	sql := st.db.hot.on(endMany, hotSuffix(t, st, idsOf(ds)))
	tokens := make([]int64, len(ds))
	for i, d := range ds {
		tokens[i] = d.LeaseToken
	}
	conn, err := st.db.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, s := range []string{`SET plan_cache_mode = force_generic_plan`, `BEGIN`,
		`PREPARE end_test(text[], bigint[], text[], text[], text[], text) AS ` + sql} {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	defer conn.Exec(ctx, `ROLLBACK`) //nolint:errcheck // the test's own transaction, undone
	done := make([]string, len(ds))
	for i := range done {
		done[i] = touba.StatusDone
	}
	var plan []map[string]any
	if _, err := conn.Exec(ctx, `SAVEPOINT s`); err != nil {
		t.Fatal(err)
	}
	// EXPLAIN takes no parameters: the arrays as literals.
	lit := func(vs []string, typ string) string {
		q := make([]string, len(vs))
		for i, v := range vs {
			q[i] = quote(v)
		}
		return `ARRAY[` + strings.Join(q, ", ") + `]::` + typ
	}
	toks := make([]string, len(tokens))
	for i, tk := range tokens {
		toks[i] = fmt.Sprint(tk)
	}
	empty := lit(make([]string, len(ds)), "text[]")
	if err := conn.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE end_test(`+lit(idsOf(ds), "text[]")+`, `+
		lit(toks, "bigint[]")+`, `+lit(done, "text[]")+`, `+empty+`, `+empty+`, 'now')`).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if rows := planRows(plan[0]["Plan"].(map[string]any)); rows > 100 {
		t.Errorf("the end of 25 entries read %.0f rows of entries, want at most 100: %v", rows, plan)
	} else {
		t.Logf("the end of 25 entries read %.0f rows of entries", rows)
	}
}

// The statements made for a partition go with it: a new one comes every
// width (10 s at the floor), and each kept its statements for good.
func TestHotLeavesKeepsOnlyListedStatements(t *testing.T) {
	h := newHotLeaves(nil)
	for _, suffix := range []string{"_p1", "_p2", "_p3"} {
		h.on(`UPDATE touba.entries e SET x = 1`, suffix)
	}
	h.keep([]hotLeaf{{from: 0, to: 10, suffix: "_p3"}})
	var left []string
	h.sql.Range(func(k, _ any) bool { left = append(left, k.(string)); return true })
	if len(left) != 1 || !strings.HasPrefix(left[0], "_p3\x00") {
		t.Errorf("statements kept: %q, want those of _p3 only", left)
	}
}
