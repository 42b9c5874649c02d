-- Fair dispatch (SPEC §2.2 "Holds take nothing"): a run that meets a
-- binding with no free max_concurrency slot in the cluster or an open
-- circuit is handed back pending with held (so entries_ready and
-- entries_ready_trigger leave it out) and hold_on naming the binding;
-- only a lease's ask for that hold takes it again, on any node. A key's
-- own hold (held without hold_on) is untouched by it. The column has no
-- default: adding it rewrites nothing.
ALTER TABLE touba.entries ADD COLUMN hold_on text;
-- Built online (issue 33): a plain build would hold SHARE on entries,
-- which intake's inserts wait for, for as long as it scans the queue.
-- touba:online
CREATE INDEX CONCURRENTLY IF NOT EXISTS entries_hold ON touba.entries (hold_on, queue_id COLLATE "C") WHERE status = 'pending' AND hold_on IS NOT NULL;
