-- Gatherings (SPEC §2.1 debounce and batch, issue 36): many deliveries of
-- one key value, one run; as in the SQLite queue (0008_gather.sql there).
-- Expand only: the previous release runs on this schema and leaves alone
-- what it does not know. It never wakes a carrier (a carrier's wake_at on
-- entries stays NULL; its gathering's time is in gatherings), never leases
-- a merged entry (not pending) and answers a merged entry's redelivery
-- 200 consumed (past pending).

-- One row per gathering, by its carrier (see the SQLite migration): live
-- while open and its carrier waits in it, never leased. At most one open
-- row per (trigger, key, value): two nodes receiving deliveries of a key
-- at once make one gathering (intake also holds the value's advisory
-- lock, queue_gather.go).
CREATE TABLE touba.gatherings (
  carrier     TEXT PRIMARY KEY,
  trigger_ref TEXT NOT NULL,
  kind        TEXT NOT NULL CHECK (kind IN ('debounce', 'batch')),
  key         TEXT NOT NULL,
  value       TEXT NOT NULL,
  state       TEXT NOT NULL CHECK (state IN ('open', 'started', 'closed')),
  size        INTEGER NOT NULL,
  opened_at   TEXT NOT NULL,
  last_at     TEXT NOT NULL,
  wake_at     TEXT NOT NULL,
  deadline    TEXT NOT NULL,
  started_at  TEXT);
CREATE UNIQUE INDEX gatherings_open ON touba.gatherings (trigger_ref, key, value) WHERE state = 'open';
-- StartDue and NextWake: the open gatherings, soonest first.
CREATE INDEX gatherings_wake ON touba.gatherings (wake_at) WHERE state = 'open';

-- Last in this step, then its commit: the ACCESS EXCLUSIVE lock the ALTER
-- takes on entries (for an instant: no rewrite, no scan) is held to the
-- commit, so nothing else runs while the previous release's writes wait.
-- Entry states gain merged. The wider CHECK is added NOT VALID (no scan
-- under that lock) and validated in the last step, under a lock reads and
-- writes pass. merged_into: the carrier's queue id, for a merged entry
-- (the history pruning reads it: a merged entry goes with its finished
-- carrier); merged_seq: its place in the gathering (the carrier is 1), the
-- order its run sees the deliveries in. No default: adding them rewrites
-- nothing.
ALTER TABLE touba.entries DROP CONSTRAINT entries_status_check,
  ADD CONSTRAINT entries_status_check
  CHECK (status IN ('pending','running','waiting','done','failed','parked','cancelled','merged')) NOT VALID,
  ADD COLUMN merged_into TEXT, ADD COLUMN merged_seq INTEGER;

-- A carrier's merged deliveries, in order (Gathered, `queue show`).
-- touba:online
CREATE INDEX CONCURRENTLY IF NOT EXISTS entries_merged ON touba.entries (merged_into, merged_seq) WHERE merged_into IS NOT NULL;

-- After the online step, so in a transaction of its own: the steps up to
-- an online one share one transaction, and the ACCESS EXCLUSIVE lock of
-- the first step would be held through this scan.
-- touba:transaction
ALTER TABLE touba.entries VALIDATE CONSTRAINT entries_status_check;
