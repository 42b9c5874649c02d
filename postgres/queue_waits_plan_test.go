package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// TestWaitPlansUseTheirIndexes: on tables of some thousands of rows (most
// entries done or cancelled, most waits ended, most offers consumed: a
// queue that ran a while), intake's match, BeginWait's offer, Wake, NextWake, the cancel
// and the listing read through their indexes, never a scan of the table.
func TestWaitPlansUseTheirIndexes(t *testing.T) {
	ctx := context.Background()
	st := openNodes(t, 1, time.Hour)[0]
	pool := st.db.pool
	const fill = `
	INSERT INTO touba.entries (queue_id, trigger_ref, event_id, digest, headers, remote_addr, received_at, status, updated_at, wake_at)
	SELECT 'e-' || lpad(i::text, 6, '0'), 'trigger:t', 'ev-' || i, 'd', '{}', '', '2026-01-01T00:00:00.000Z',
		CASE WHEN i % 50 = 0 THEN 'waiting' WHEN i % 10 = 5 THEN 'cancelled' ELSE 'done' END, '2026-01-01T00:00:00.000Z',
		CASE WHEN i % 50 = 0 THEN to_char(timestamp '2027-01-01' + i * interval '1 minute', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') END
	FROM generate_series(1, 8000) i;
	INSERT INTO touba.waits (queue_id, step_id, kind, key, value, state, matched_queue_id, created_at, resolved_at)
	SELECT 'e-' || lpad(i::text, 6, '0'), 'paid', 'event', 'trigger:t#paid', '"v-' || i || '"',
		CASE WHEN i % 50 = 0 THEN 'open' ELSE 'matched' END, CASE WHEN i % 50 = 0 THEN NULL ELSE 'o-' || i END,
		'2026-01-01T00:00:00.000Z', NULL
	FROM generate_series(1, 8000) i;
	INSERT INTO touba.offers (queue_id, key, value, created_at, consumed_by)
	SELECT 'o-' || i, 'trigger:t#paid', '"v-' || i || '"', '2026-01-01T00:00:00.000Z',
		CASE WHEN i % 40 = 0 THEN NULL ELSE 'e-' || lpad(i::text, 6, '0') END
	FROM generate_series(1, 8000) i;
	INSERT INTO touba.cancel_keys (key, value, queue_id)
	SELECT 'trigger:t#cancel_on/0', '"v-' || i || '"', 'e-' || lpad(i::text, 6, '0') FROM generate_series(1, 8000) i;
	ANALYZE touba.entries; ANALYZE touba.waits; ANALYZE touba.offers; ANALYZE touba.cancel_keys`
	if _, err := pool.Exec(ctx, fill); err != nil {
		t.Fatal(err)
	}
	now := touba.FormatTime(time.Date(2027, 1, 2, 0, 0, 0, 0, time.UTC))
	for _, c := range []struct {
		name, sql string
		args      []any
		want      []string // index names the plan must read
	}{
		{"intake's match", qOffer, []any{"new", "trigger:t#paid", `"v-100"`, now}, []string{"waits_open"}},
		{"BeginWait's offer", qBegin, []any{"e-000001", "x", "event", "trigger:t#paid", `"v-80"`, nil, now}, []string{"offers_open"}},
		{"Wake", qWake, []any{now, 100, now}, []string{"entries_wake"}},
		{"NextWake", qNextWake, nil, []string{"entries_wake"}},
		{"cancel's wait locks", qLockCancelWaits, []any{"trigger:t#cancel_on/0", `"v-7"`}, []string{"cancel_keys_pkey", "waits_pkey"}},
		{"cancel", qCancel, []any{"trigger:t#cancel_on/0", `"v-7"`, "cancelled", now}, []string{"cancel_keys_pkey"}},
		{"cancel's waits", qCancelWaits, []any{"trigger:t#cancel_on/0", `"v-7"`, now}, []string{"cancel_keys_pkey", "waits_pkey"}},
		{"Waits", qWaits, []any{"e-000100"}, []string{"waits_pkey", "waits_matched"}},
	} {
		rows, err := pool.Query(ctx, "EXPLAIN "+c.sql, c.args...)
		if err != nil {
			t.Fatalf("%s: explain: %v", c.name, err)
		}
		var lines []string
		for rows.Next() {
			var l string
			if err := rows.Scan(&l); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, l)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: explain: %v", c.name, err)
		}
		plan := strings.Join(lines, "\n")
		for _, idx := range c.want {
			// entries is partitioned (SPEC §8.1): its rows are in
			// entries_other, whose copy of entries_wake is entries_other_wake.
			idx := strings.Replace(idx, "entries_", "entries_other_", 1)
			if !strings.Contains(plan, "Index Scan using "+idx) && !strings.Contains(plan, "Index Only Scan using "+idx) &&
				!strings.Contains(plan, "Bitmap Index Scan on "+idx) {
				t.Errorf("%s: no index scan of %s:\n%s", c.name, idx, plan)
			}
		}
		for _, table := range []string{"entries", "waits", "offers", "cancel_keys"} {
			// The rows are in entries_other (their ids are no UUIDs); the
			// empty time partitions may be read whole: there is nothing.
			if strings.Contains(plan, "Seq Scan on "+table+" ") || strings.Contains(plan, "Seq Scan on "+table+"_other ") {
				t.Errorf("%s: reads all of %s:\n%s", c.name, table, plan)
			}
		}
		if testing.Verbose() {
			t.Logf("%s:\n%s", c.name, plan)
		}
	}
}
