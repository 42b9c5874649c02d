package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/touba/touba-trigger/postgres"
)

// prefillHistory gives a new database days of finished history at perDay
// deliveries a day, as a node running with --history window since then
// would have left it: the partitions the defaults choose (opened with the
// clock at each step, so each open creates the ones ahead of it), and in
// them done entries with their run, applied effect, the effect's three
// events; bodies older than --retention's default (168h) already purged,
// as that pass leaves them; and a delivery log row for each delivery of the
// last 168h only, as the log's prune leaves it (--delivery-log-max-age's
// default: with rows for all 90 days, the first prune of a drain longer
// than 30 s deleted 83,000 of them, about 220 ms of the database's CPU
// counted in the drain). The rows are written by SQL, not by a
// daemon: the point is what the hot statements plan and probe against,
// not how the history was made.
func prefillHistory(ctx context.Context, url string, days, perDay int, window time.Duration) {
	end := time.Now()
	start := end.Add(-time.Duration(days) * 24 * time.Hour)
	width := postgres.PartitionWidth(window)
	for at := start; ; at = at.Add(width) {
		if at.After(end) {
			at = end
		}
		st, err := postgres.Open(ctx, postgres.Config{URL: url, NodeID: "prefill-history", Log: zerolog.Nop(),
			History: window, Now: func() time.Time { return at }})
		if err != nil {
			log.Fatal(err)
		}
		st.Close()
		if !at.Before(end) {
			break
		}
	}
	conn := connect(ctx, url)
	defer conn.Close(ctx)
	// One statement a day: perDay ids spread over the day, each a UUIDv7
	// of its millisecond (48 bits of time, then version 7 and random bits).
	for d := range days {
		dayStart := start.Add(time.Duration(d) * 24 * time.Hour).UnixMilli()
		_, err := conn.Exec(ctx, `WITH ids AS (
			SELECT g, ms, lpad(to_hex(ms >> 16), 8, '0') || '-' || lpad(to_hex(ms & 65535), 4, '0') || '-7' ||
				substr(md5(g::text || $1::text), 1, 3) || '-8' || substr(md5(g::text || $1::text), 4, 3) || '-' ||
				substr(md5(g::text || $1::text), 7, 12) AS id,
				to_char(to_timestamp(ms / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS at
			FROM (SELECT g, $1::bigint + (g * 86400000::bigint / $2) AS ms FROM generate_series(0, $2 - 1) g) s),
		e AS (INSERT INTO touba.entries (queue_id, trigger_ref, event_id, digest, body, headers, remote_addr, received_at,
				status, attempts, updated_at, leased, kept)
			SELECT id, 'trigger:bench/Ingest', 'history-' || id, 'sha256:00', CASE WHEN ms > $3 THEN '{"data":"x"}'::bytea END, '{}', 'prefill', at,
				'done', 1, at, true, false FROM ids),
		r AS (INSERT INTO touba.runs (run_id, queue_id, trigger_ref, attempt, status, started_at, ended_at, node_id)
			SELECT id || '-r', id, 'trigger:bench/Ingest', 1, 'done', at, at, 'prefill' FROM ids),
		x AS (INSERT INTO touba.effects (scope, effect_id, tool_ref, operation, fingerprint, retry_mode, state, attempts,
				call_id, result, created_at, updated_at, kept)
			SELECT id, 'post', 'tool:bench/Post', 'create', 'sha256:00', 'idempotency_key', 'applied', 1, id || '-c', '{}', at, at, false FROM ids),
		v AS (INSERT INTO touba.effect_events (scope, effect_id, call_id, state, at, detail)
			SELECT id, 'post', id || '-c', s, at, s FROM ids, unnest(ARRAY['prepared', 'dispatched', 'applied']) s)
		INSERT INTO touba.deliveries (delivery_id, at, trigger_ref, event_id, digest, status_code, error_code, queue_id,
				remote_addr, headers, body)
			SELECT id, at, 'trigger:bench/Ingest', 'history-' || id, 'sha256:00', 202, '', id, 'prefill', '{}', NULL FROM ids
			WHERE ms > $3`,
			dayStart, perDay, end.Add(-168*time.Hour).UnixMilli())
		if err != nil {
			log.Fatalf("history day %d: %v", d, err)
		}
	}
	purgeMarks(ctx, conn, end)
	// Vacuumed and checkpointed, as months-old history is: else the
	// autovacuum of the rows just written (insert-triggered) and the
	// checkpoint of their WAL fall in the drain and count as its CPU.
	for _, s := range []string{`VACUUM (ANALYZE)`, `CHECKPOINT`} {
		if _, err := conn.Exec(ctx, s); err != nil {
			log.Fatal(err)
		}
	}
	var leaves int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE c.relname LIKE 'entries\_p%'`).Scan(&leaves); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("history: %d days at %d a day, partitions %s wide, %d time partitions of entries\n", days, perDay, width, leaves)
}

// purgeMarks writes the retention pass's marks and state as the nodes
// leave them (postgres/queue_purge.go): a mark for each hour the passes
// may read (the floor an hour behind, nothing older being unfinished), the
// last hourly pass's cutoff, and the daily pass that reads every entry
// half a day ago. None for a build from before them.
func purgeMarks(ctx context.Context, conn *pgx.Conn, end time.Time) {
	var marks bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('touba.purge_marks') IS NOT NULL`).Scan(&marks); err != nil {
		log.Fatal(err)
	}
	if !marks {
		return
	}
	if _, err := conn.Exec(ctx, `INSERT INTO touba.purge_marks (hour, floor)
		SELECT to_char(h, 'YYYY-MM-DD"T"HH24'), lpad(to_hex(ms >> 16), 8, '0') || '-' || lpad(to_hex(ms & 65535), 4, '0') || '-0000-0000-000000000000'
		FROM generate_series(date_trunc('hour', $1::timestamp) - interval '9 days', date_trunc('hour', $1::timestamp), interval '1 hour') h,
			LATERAL (SELECT (extract(epoch FROM h - interval '1 hour') * 1000)::bigint AS ms) m
		ON CONFLICT DO NOTHING`, end.UTC()); err != nil {
		log.Fatal(err)
	}
	stamp := func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
	if _, err := conn.Exec(ctx, `INSERT INTO touba.purge_state (one, cutoff, full_at) VALUES (true, $1, $2)`,
		stamp(end.Add(-169*time.Hour)), stamp(end.Add(-12*time.Hour))); err != nil {
		log.Fatal(err)
	}
}
