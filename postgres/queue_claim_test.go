package postgres

import (
	"context"
	"strings"
	"testing"
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
	sql := st.Queue.claimSQL(pickTrigger, "", 35)
	for _, mode := range []string{"auto", "force_custom_plan", "force_generic_plan"} {
		conn, err := st.db.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stmts := []string{`SET plan_cache_mode = ` + mode, `BEGIN`}
		stmts = append(append(stmts, claimSets...), claimPlanSets...)
		stmts = append(stmts, `PREPARE claim_test(text, bigint, text, text) AS `+sql)
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
			var plan []map[string]any
			if err := conn.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE claim_test('`+st.db.now()+`', 35, 'node-x', 'trigger:t')`).Scan(&plan); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, `ROLLBACK TO SAVEPOINT s`); err != nil {
				t.Fatal(err)
			}
			rows = planRows(plan[0]["Plan"].(map[string]any))
		}
		for _, s := range []string{`ROLLBACK`, `DEALLOCATE claim_test`, `RESET plan_cache_mode`} {
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
