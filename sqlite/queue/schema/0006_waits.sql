-- Durable steps (SPEC §2.3): sleeps, waits for another trigger's event,
-- cancellation, version pinning and resume from a step (waits.go, offers.go,
-- resume.go, programs.go).
--
-- The status CHECK of entries must admit 'waiting' and 'cancelled', and
-- SQLite cannot alter a CHECK: the table is rebuilt (new table, copy, drop,
-- rename) and every index of the earlier migrations made again, in this
-- migration's transaction, so a crash leaves either the old table or the
-- new one. The new columns:
--   wake_at          when a waiting entry wakes (a sleep's end, a wait's
--                    timeout); NULL otherwise, and for a wait with no timeout
--   program_digest   the digest of the trigger's definition at acceptance
--   cancel_requested NULL, or why the entry is to end cancelled: a cancel_on
--                    match arrived while it ran (its message names the
--                    cancelling delivery and becomes the entry's)
--   effect_gens      JSON object step id -> effect generation after resumes
--                    with new effects; NULL: none
CREATE TABLE entries_v6 (
  queue_id         TEXT PRIMARY KEY,
  trigger_ref      TEXT NOT NULL,
  event_id         TEXT NOT NULL,
  digest           TEXT NOT NULL,
  body             BLOB,
  headers          TEXT NOT NULL,
  remote_addr      TEXT NOT NULL,
  received_at      TEXT NOT NULL,
  status           TEXT NOT NULL CHECK (status IN ('pending','running','waiting','done','failed','parked','cancelled')),
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
  effect_gens      TEXT
) STRICT;

INSERT INTO entries_v6 (queue_id, trigger_ref, event_id, digest, body, headers, remote_addr, received_at, status,
    attempts, not_before, error_code, error_message, updated_at, conc_key, conc_max, held, traceparent, lease_token,
    first_token)
  SELECT queue_id, trigger_ref, event_id, digest, body, headers, remote_addr, received_at, status,
    attempts, not_before, error_code, error_message, updated_at, conc_key, conc_max, held, traceparent, lease_token,
    first_token
  FROM entries;
DROP TABLE entries;
ALTER TABLE entries_v6 RENAME TO entries;

-- 0001
CREATE UNIQUE INDEX entries_identity ON entries (trigger_ref, event_id) WHERE event_id != '';
CREATE INDEX entries_status ON entries (status, queue_id);
-- 0002_concurrency, with 'waiting' among the active states: a waiting entry
-- is in progress like a running one and keeps its key (concurrency.go).
CREATE INDEX entries_key ON entries (trigger_ref, conc_key, queue_id)
  WHERE conc_key IS NOT NULL AND status IN ('pending', 'running', 'parked', 'waiting');
CREATE INDEX entries_ready ON entries (status, held, queue_id);
-- 0003_console_listing
CREATE INDEX entries_trigger_list ON entries (trigger_ref, queue_id);
-- 0005_holds
CREATE INDEX entries_ready_trigger ON entries (trigger_ref, queue_id) WHERE status = 'pending' AND held = 0;
-- What Wake and NextWake read: the waiting entries with a time, soonest
-- first. Partial, so the rest of the queue costs them nothing.
CREATE INDEX entries_wake ON entries (wake_at) WHERE status = 'waiting';

-- One row per sleep or wait_for step an entry reached, until a resume from
-- that step removes it. An open event wait is found by intake through
-- waits_open, earliest (created_at, queue_id) first.
CREATE TABLE waits (
  queue_id         TEXT NOT NULL,
  step_id          TEXT NOT NULL,
  kind             TEXT NOT NULL CHECK (kind IN ('sleep', 'event')),
  key              TEXT NOT NULL DEFAULT '',
  value            TEXT NOT NULL DEFAULT '',
  wake_at          TEXT,
  state            TEXT NOT NULL CHECK (state IN ('open', 'woke', 'matched', 'timed_out', 'cancelled')),
  matched_queue_id TEXT,
  created_at       TEXT NOT NULL,
  resolved_at      TEXT,
  PRIMARY KEY (queue_id, step_id)
) STRICT;
CREATE INDEX waits_open ON waits (key, value, created_at, queue_id) WHERE state = 'open';
CREATE INDEX waits_matched ON waits (matched_queue_id) WHERE matched_queue_id IS NOT NULL;

-- What a delivery offers the waits of its key: consumed_by is the waiting
-- entry whose wait (of key) took it; unconsumed offers wait for a later
-- wait, earliest (seq) first.
CREATE TABLE offers (
  seq         INTEGER PRIMARY KEY,
  key         TEXT NOT NULL,
  value       TEXT NOT NULL,
  queue_id    TEXT NOT NULL,
  consumed_by TEXT,
  created_at  TEXT NOT NULL
) STRICT;
CREATE INDEX offers_open ON offers (key, value, seq) WHERE consumed_by IS NULL;
CREATE INDEX offers_consumed ON offers (consumed_by, key) WHERE consumed_by IS NOT NULL;
CREATE INDEX offers_entry ON offers (queue_id);

-- The values by which a later delivery cancels an entry (its cancel_on
-- match values, resolved at acceptance).
CREATE TABLE cancel_keys (
  key      TEXT NOT NULL,
  value    TEXT NOT NULL,
  queue_id TEXT NOT NULL
) STRICT;
CREATE INDEX cancel_keys_match ON cancel_keys (key, value);
CREATE INDEX cancel_keys_entry ON cancel_keys (queue_id);

-- Trigger definitions by digest (version pinning): a run of an entry
-- accepted under an older definition reads it here.
CREATE TABLE programs (
  digest     TEXT PRIMARY KEY,
  definition BLOB NOT NULL,
  saved_at   TEXT NOT NULL
) STRICT;
