-- touba-trigger on PostgreSQL (SPEC §8): the queue, the identities, the run
-- state, the delivery log and the effect journal of every node, in schema
-- touba. Timestamps are text in touba.TimeFormat (UTC, milliseconds), as in
-- the SQLite files, so text order is time order and §5's columns keep
-- their type.

-- The queue (SPEC §3.1, §3.2), with the lease of §8: lease_owner names the
-- node running the entry, lease_expires_at when another node may take it
-- over, lease_token the fencing token of the lease (from lease_tokens).
CREATE TABLE entries (
  queue_id         TEXT PRIMARY KEY,
  trigger_ref      TEXT NOT NULL,
  event_id         TEXT NOT NULL,
  digest           TEXT NOT NULL,
  body             BYTEA,
  headers          TEXT NOT NULL,
  remote_addr      TEXT NOT NULL,
  received_at      TEXT NOT NULL,
  status           TEXT NOT NULL CHECK (status IN ('pending','running','done','failed','parked')),
  attempts         INTEGER NOT NULL DEFAULT 0,
  not_before       TEXT,
  error_code       TEXT,
  error_message    TEXT,
  updated_at       TEXT NOT NULL,
  traceparent      TEXT NOT NULL DEFAULT '',
  conc_key         TEXT,
  conc_max         INTEGER NOT NULL DEFAULT 0,
  held             BOOLEAN NOT NULL DEFAULT false,
  lease_owner      TEXT,
  lease_expires_at TEXT,
  lease_token      BIGINT NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX entries_identity ON entries (trigger_ref, event_id) WHERE event_id <> '';
CREATE INDEX entries_ready ON entries (status, held, queue_id);
CREATE INDEX entries_key ON entries (trigger_ref, conc_key, queue_id)
  WHERE conc_key IS NOT NULL AND status IN ('pending', 'running', 'parked');
CREATE INDEX entries_leases ON entries (lease_expires_at) WHERE status = 'running';
CREATE SEQUENCE lease_tokens;

-- Run history and step checkpoints.
CREATE TABLE runs (
  run_id TEXT PRIMARY KEY, queue_id TEXT NOT NULL, trigger_ref TEXT NOT NULL, attempt INTEGER NOT NULL,
  status TEXT NOT NULL, error_code TEXT, error_message TEXT, started_at TEXT NOT NULL, ended_at TEXT,
  node_id TEXT NOT NULL DEFAULT '');
CREATE INDEX runs_queue ON runs (queue_id, started_at);
CREATE TABLE run_steps (
  queue_id TEXT NOT NULL, step_id TEXT NOT NULL, run_id TEXT NOT NULL, output TEXT NOT NULL, at TEXT NOT NULL,
  PRIMARY KEY (queue_id, step_id));

-- The delivery log (SPEC §6).
CREATE TABLE deliveries (
  seq BIGSERIAL PRIMARY KEY, delivery_id TEXT NOT NULL UNIQUE, at TEXT NOT NULL, trigger_ref TEXT NOT NULL,
  event_id TEXT NOT NULL, digest TEXT NOT NULL, status_code INTEGER NOT NULL, error_code TEXT NOT NULL,
  queue_id TEXT NOT NULL, remote_addr TEXT NOT NULL, headers TEXT NOT NULL, body BYTEA);
CREATE INDEX deliveries_at ON deliveries (at);
CREATE INDEX deliveries_code ON deliveries (error_code, seq);

-- The operators' audit trail.
CREATE TABLE operator_events (
  seq BIGSERIAL PRIMARY KEY, at TEXT NOT NULL, action TEXT NOT NULL, queue_id TEXT NOT NULL,
  target TEXT NOT NULL, outcome TEXT NOT NULL, operator TEXT NOT NULL, detail TEXT NOT NULL);
CREATE INDEX operator_events_queue ON operator_events (queue_id, seq);

-- touba-effect-journal-v1 (SPEC §5): names and columns fixed by the
-- contract; owner (the open journal handle holding a prepared or
-- dispatched effect) and lease_token (the entry's lease it was prepared
-- under) are ours.
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta (key, value) VALUES ('format', 'touba-effect-journal-v1');
CREATE TABLE effects (
  scope TEXT NOT NULL, effect_id TEXT NOT NULL, tool_ref TEXT NOT NULL, operation TEXT NOT NULL,
  fingerprint TEXT NOT NULL, retry_mode TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('prepared','dispatched','applied','not_applied','unknown')),
  attempts INTEGER NOT NULL, call_id TEXT, receipt_ref TEXT, result TEXT, error_code TEXT, receipt_error_code TEXT,
  created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
  owner TEXT, lease_token BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (scope, effect_id));
CREATE INDEX effects_state ON effects (state, created_at);
CREATE TABLE effect_events (seq BIGSERIAL PRIMARY KEY, scope TEXT NOT NULL, effect_id TEXT NOT NULL,
  call_id TEXT, state TEXT NOT NULL, at TEXT NOT NULL, detail TEXT);
CREATE INDEX effect_events_effect ON effect_events (scope, effect_id, seq);

-- The audit trail is append-only and an applied effect is never rewritten,
-- whatever a bug or a hand-typed UPDATE tries.
CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION '%', TG_ARGV[0]; END $$;
CREATE TRIGGER effect_events_append_only BEFORE UPDATE OR DELETE ON effect_events
  FOR EACH ROW EXECUTE FUNCTION refuse('effect_events is append-only');
CREATE TRIGGER effects_applied_final BEFORE UPDATE ON effects
  FOR EACH ROW WHEN (OLD.state = 'applied') EXECUTE FUNCTION refuse('an applied effect is never rewritten');
