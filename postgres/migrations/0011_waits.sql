-- Durable steps (SPEC §2.3, issue 25): sleeps and waits for an event,
-- cancellation, version pinning and resume from a step, shared by every
-- node. A waiting entry holds no lease: any node's Wake ends it.

-- Entry states gain waiting and cancelled.
ALTER TABLE touba.entries DROP CONSTRAINT entries_status_check;
ALTER TABLE touba.entries ADD CONSTRAINT entries_status_check
  CHECK (status IN ('pending','running','waiting','done','failed','parked','cancelled'));

-- wake_at: when a waiting entry wakes (a sleep's end, a wait's timeout;
-- NULL for a wait with no timeout). program_digest: the digest of the
-- trigger's definition when accepted ('' before it was kept).
-- cancel_requested: NULL, or the message naming the delivery that asked a
-- running entry to cancel (it ends cancelled at its next transition).
-- effect_gens: each resumed step's effect generation ({"step": n}).
ALTER TABLE touba.entries
  ADD COLUMN wake_at TEXT,
  ADD COLUMN program_digest TEXT NOT NULL DEFAULT '',
  ADD COLUMN cancel_requested TEXT,
  ADD COLUMN effect_gens JSONB;
-- Wake and NextWake read the due waiting entries through this, whatever
-- the size of the rest of the queue.
CREATE INDEX entries_wake ON touba.entries (wake_at) WHERE status = 'waiting';

-- A waiting entry keeps its concurrency key, as a running one does: the
-- key's active set (concurrency.go) gains waiting.
DROP INDEX touba.entries_key;
CREATE INDEX entries_key ON touba.entries (trigger_ref, conc_key, conc_seq)
  WHERE conc_key IS NOT NULL AND status IN ('pending', 'running', 'waiting', 'parked');

-- One sleep or wait_for step of one entry: at most one per (queue_id,
-- step_id) until a resume from that step removes it. key, value: what an
-- event wait awaits (a WaitKey and the compact JSON of the match value).
CREATE TABLE touba.waits (
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
  PRIMARY KEY (queue_id, step_id));
-- Intake's match: the earliest open wait of (key, value).
CREATE INDEX waits_open ON touba.waits (key, value, created_at, queue_id) WHERE state = 'open';
-- `queue show` of the awaited delivery: the waits it matched.
CREATE INDEX waits_matched ON touba.waits (matched_queue_id) WHERE matched_queue_id IS NOT NULL;

-- A delivery's value for a wait_for step awaiting its trigger (key: the
-- WaitKey), stored with the delivery: consumed at once by the earliest
-- open wait of (key, value), or later by the first wait to begin. Each is
-- consumed by at most one wait (consumed_by: the waiting entry; the step
-- is in the key).
CREATE TABLE touba.offers (
  queue_id    TEXT NOT NULL,
  key         TEXT NOT NULL,
  value       TEXT NOT NULL,
  created_at  TEXT NOT NULL,
  consumed_by TEXT,
  PRIMARY KEY (queue_id, key));
-- BeginWait's match: the earliest unconsumed offer of (key, value).
CREATE INDEX offers_open ON touba.offers (key, value, created_at, queue_id) WHERE consumed_by IS NULL;
-- Retention: the offers a purged entry consumed go with it.
CREATE INDEX offers_consumed ON touba.offers (consumed_by) WHERE consumed_by IS NOT NULL;

-- An entry's own cancel_on match values (key: CancelKey of its trigger), by
-- which a later delivery cancels it.
CREATE TABLE touba.cancel_keys (
  key      TEXT NOT NULL,
  value    TEXT NOT NULL,
  queue_id TEXT NOT NULL,
  PRIMARY KEY (key, value, queue_id));
CREATE INDEX cancel_keys_queue ON touba.cancel_keys (queue_id);

-- Trigger definitions by digest, for runs pinned to an older one.
CREATE TABLE touba.programs (
  digest     TEXT PRIMARY KEY,
  definition BYTEA NOT NULL,
  saved_at   TEXT NOT NULL);
