package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// planRows sums, over an EXPLAIN (ANALYZE, FORMAT JSON) plan, the rows
// its nodes read from the relations named entries*: the rows they
// returned and the ones their filters removed, every loop.
func planRows(node map[string]any) float64 {
	var n float64
	if rel, _ := node["Relation Name"].(string); strings.HasPrefix(rel, "entries") {
		loops, _ := node["Actual Loops"].(float64)
		rows, _ := node["Actual Rows"].(float64)
		removed, _ := node["Rows Removed by Filter"].(float64)
		n += (rows + removed) * max(loops, 1)
	}
	{
		kids, _ := node["Plans"].([]any)
		for _, k := range kids {
			if m, ok := k.(map[string]any); ok {
				n += planRows(m)
			}
		}
	}
	return n
}

// A lease reads the entries it takes, not the table, whatever the
// session's plan_cache_mode: with 4,000 finished entries beside 100
// pending, the claim of 35 (the fair lease's pick of one trigger) reads
// a few hundred rows at most, executed as the daemon runs it (claimPlan's
// and claim's settings, its sixth execution: past the custom plans auto
// tries first). Issue 42: its generic plan joined the pick to a second
// read of entries, hashing every row of every partition.
func TestClaimReadsOnlyItsRows(t *testing.T) {
	st, _ := deferStore(t)
	ctx := context.Background()
	leaseAll(t, st, 1) // one entry, copied below
	setup, err := st.db.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Release()
	if _, err := setup.Exec(ctx, `SET statement_timeout = 0`); err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Exec(ctx, `INSERT INTO touba.entries
		SELECT (jsonb_populate_record(e, jsonb_build_object('queue_id', left(e.queue_id, 24) || lpad(to_hex(g), 12, '0'),
			'event_id', 'h-' || g, 'status', CASE WHEN g <= 4000 THEN 'done' ELSE 'pending' END, 'lease_token', 0, 'lease_owner', NULL,
			'lease_expires_at', NULL, 'leased', false))).*
		FROM touba.entries e, generate_series(1, 4100) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Exec(ctx, `ANALYZE touba.entries`); err != nil {
		t.Fatal(err)
	}
	var leaf string
	var ids []string
	if err := setup.QueryRow(ctx, `SELECT min(tableoid::regclass::text), array_agg(queue_id) FROM (SELECT tableoid, queue_id
		FROM touba.entries WHERE status = 'pending' ORDER BY queue_id LIMIT 35) p`).Scan(&leaf, &ids); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"auto", "force_custom_plan", "force_generic_plan"} {
		conn, err := st.db.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stmts := []string{`SET plan_cache_mode = ` + mode, `BEGIN`}
		stmts = append(append(stmts, claimSets...), claimPlanSets...)
		stmts = append(stmts, `PREPARE claim_test(text, bigint, text, text) AS `+pickSQL(pickTrigger, 35),
			`PREPARE claim_upd(text, text, text[]) AS `+st.Queue.claimSQL(leaf))
		for _, s := range stmts {
			if _, err := conn.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		var rows float64
		for range 6 {
			if _, err := conn.Exec(ctx, `SAVEPOINT s`); err != nil {
				t.Fatal(err)
			}
			rows = 0
			for _, ex := range []string{`EXECUTE claim_test('` + st.db.now() + `', 35, 'node-x', 'trigger:t')`,
				`EXECUTE claim_upd('` + st.db.now() + `', 'node-x', '{` + strings.Join(ids, ",") + `}')`} {
				var plan []map[string]any
				if err := conn.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+ex).Scan(&plan); err != nil {
					t.Fatal(err)
				}
				rows += planRows(plan[0]["Plan"].(map[string]any))
			}
			if _, err := conn.Exec(ctx, `ROLLBACK TO SAVEPOINT s`); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range []string{`ROLLBACK`, `DEALLOCATE claim_test`, `DEALLOCATE claim_upd`, `RESET plan_cache_mode`} {
			if _, err := conn.Exec(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		conn.Release()
		if rows > 400 {
			t.Errorf("plan_cache_mode %s: a claim of 35 read %.0f rows of entries, want at most 400", mode, rows)
		} else {
			t.Logf("plan_cache_mode %s: a claim of 35 read %.0f rows of entries", mode, rows)
		}
	}
}

// A claim's update locks the partition its rows are in, not every
// partition of entries: with twenty more time partitions, the relations
// it holds RowExclusiveLock on are that leaf and its indexes. Issue 42:
// an update of the parent joined to the pick is a generic plan naming
// every leaf, and PostgreSQL 15 locks each relation such a plan names
// (1,431 relation locks a claim on 72 partitions).
func TestClaimLocksItsPartition(t *testing.T) {
	st, _ := deferStore(t)
	ctx := context.Background()
	ahead := time.Now().Add(200 * 24 * time.Hour).UnixMilli() // past the partitions made ahead
	if n, err := ensureRange(ctx, st.db.pool, time.Hour, ahead, ahead+20*time.Hour.Milliseconds()); err != nil || n < 20 {
		t.Fatalf("partitions ahead: %d, %v", n, err)
	}
	for i := range 40 {
		d := &touba.Delivery{TriggerRef: "trigger:t", EventID: fmt.Sprintf("e-%d", i), Digest: "d", Body: []byte(`{}`)}
		if _, err := st.Queue.Enqueue(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	var leafRels int
	if err := st.db.pool.QueryRow(ctx, `SELECT 1 + count(*) FROM pg_index
		WHERE indrelid = (SELECT tableoid FROM touba.entries LIMIT 1)`).Scan(&leafRels); err != nil {
		t.Fatal(err)
	}
	errDone := errors.New("rolled back")
	var got []*touba.Delivery
	var locked []string
	err := st.Queue.change("", func(ctx context.Context, tx *Tx) error {
		if _, err := claimPlan(ctx, tx); err != nil {
			return err
		}
		var err error
		if got, _, err = st.Queue.claim(ctx, tx, pickTrigger, 35, nil, nil, "trigger:t"); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT array_agg(c.relname ORDER BY c.relname) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE l.pid = pg_backend_pid() AND l.mode = 'RowExclusiveLock' AND c.relname LIKE 'entries%'`).Scan(&locked); err != nil {
			return err
		}
		return errDone
	})
	if !errors.Is(err, errDone) {
		t.Fatal(err)
	}
	if len(got) != 35 {
		t.Fatalf("claimed %d entries, want 35", len(got))
	}
	if len(locked) > leafRels {
		t.Errorf("the claim holds RowExclusiveLock on %d relations of entries, want at most %d (one leaf and its indexes): %v",
			len(locked), leafRels, locked)
	} else {
		t.Logf("the claim holds RowExclusiveLock on %v", locked)
	}
}
