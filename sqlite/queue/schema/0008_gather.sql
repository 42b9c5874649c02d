-- Gatherings (SPEC §2.1 debounce and batch, issue 36): many deliveries of
-- one key value, one run (gather.go).
--
-- The status CHECK of entries must admit 'merged', and SQLite cannot alter
-- a CHECK: the table is rebuilt (new table, copy, drop, rename) and every
-- index the earlier migrations made on it is made again, in this
-- migration's transaction, as 0006 did. An index added to entries by a
-- migration ordered before this one must be added below too
-- (TestMigrateGatherKeepsIndexes fails otherwise). The new columns:
--   merged_into  the carrier's queue id, for a merged entry; NULL otherwise
--   merged_seq   its place in the carrier's gathering (the carrier is 1),
--                the order the run sees the deliveries in
-- A release without gatherings leaves both alone, as it does the gatherings
-- table: it never wakes a carrier (its wake_at on entries stays NULL; the
-- gathering's own time is in gatherings) and never replays a merged entry.
CREATE TABLE entries_v8 (
  queue_id         TEXT PRIMARY KEY,
  trigger_ref      TEXT NOT NULL,
  event_id         TEXT NOT NULL,
  digest           TEXT NOT NULL,
  body             BLOB,
  headers          TEXT NOT NULL,
  remote_addr      TEXT NOT NULL,
  received_at      TEXT NOT NULL,
  status           TEXT NOT NULL CHECK (status IN ('pending','running','waiting','done','failed','parked','cancelled','merged')),
  attempts         INTEGER NOT NULL DEFAULT 0,
  not_before       TEXT,
  error_code       TEXT,
  error_message    TEXT,
  updated_at       TEXT NOT NULL,
  conc_key         TEXT,
  conc_max         INTEGER NOT NULL DEFAULT 0,
  held             INTEGER NOT NULL DEFAULT 0,
  traceparent      TEXT NOT NULL DEFAULT '',
  lease_token      INTEGER NOT NULL DEFAULT 0,
  first_token      INTEGER NOT NULL DEFAULT 0,
  wake_at          TEXT,
  program_digest   TEXT NOT NULL DEFAULT '',
  cancel_requested TEXT,
  effect_gens      TEXT,
  hold_on          TEXT,
  merged_into      TEXT,
  merged_seq       INTEGER
) STRICT;

INSERT INTO entries_v8 (queue_id, trigger_ref, event_id, digest, body, headers, remote_addr, received_at, status,
    attempts, not_before, error_code, error_message, updated_at, conc_key, conc_max, held, traceparent, lease_token,
    first_token, wake_at, program_digest, cancel_requested, effect_gens, hold_on)
  SELECT queue_id, trigger_ref, event_id, digest, body, headers, remote_addr, received_at, status,
    attempts, not_before, error_code, error_message, updated_at, conc_key, conc_max, held, traceparent, lease_token,
    first_token, wake_at, program_digest, cancel_requested, effect_gens, hold_on
  FROM entries;
DROP TABLE entries;
ALTER TABLE entries_v8 RENAME TO entries;

-- The indexes of 0001 to 0007, as 0006 left them.
CREATE UNIQUE INDEX entries_identity ON entries (trigger_ref, event_id) WHERE event_id != '';
CREATE INDEX entries_status ON entries (status, queue_id);
CREATE INDEX entries_key ON entries (trigger_ref, conc_key, queue_id)
  WHERE conc_key IS NOT NULL AND status IN ('pending', 'running', 'parked', 'waiting');
CREATE INDEX entries_ready ON entries (status, held, queue_id);
CREATE INDEX entries_trigger_list ON entries (trigger_ref, queue_id);
CREATE INDEX entries_ready_trigger ON entries (trigger_ref, queue_id) WHERE status = 'pending' AND held = 0;
CREATE INDEX entries_wake ON entries (wake_at) WHERE status = 'waiting';
CREATE INDEX entries_hold ON entries (hold_on, queue_id) WHERE status = 'pending' AND hold_on IS NOT NULL;
-- A carrier's gathered deliveries, in order (Gathered, `queue show`).
CREATE INDEX entries_merged ON entries (merged_into, merged_seq) WHERE merged_into IS NOT NULL;

-- One row per gathering, by its carrier. key: the kind and the key's
-- pointer (touba.GatherKeyOf); value: the key's value (compact JSON, ''
-- for a batch without a key). A gathering is live while state is 'open'
-- and its carrier waits, never leased (touba.Gathering): at most one open
-- row per (trigger, key, value), so intake finds it through
-- gatherings_open and a new one replaces a dead one (closed first).
-- wake_at: when it starts unless a delivery moves it (debounce) or fills
-- it (max_size); deadline: debounce's bound, max_wait_ms after opened_at.
CREATE TABLE gatherings (
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
  started_at  TEXT
) STRICT;
CREATE UNIQUE INDEX gatherings_open ON gatherings (trigger_ref, key, value) WHERE state = 'open';
-- What Wake and NextWake read: the open gatherings, soonest first.
CREATE INDEX gatherings_wake ON gatherings (wake_at) WHERE state = 'open';
