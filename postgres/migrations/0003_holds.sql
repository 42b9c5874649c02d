-- Holds on dispatch (SPEC §6 triggers pause, §2.2 circuit), shared by every
-- node: the lease skips the entries of a paused trigger on every node, and a
-- binding's circuit is the cluster's.
CREATE TABLE touba.paused_triggers (
  trigger_ref TEXT PRIMARY KEY,
  paused_at   TEXT NOT NULL,
  operator    TEXT NOT NULL,
  reason      TEXT NOT NULL DEFAULT '');

-- A row per binding whose circuit ever left closed. state is closed, open
-- (until: when a probe may go) or probing (since: when the probe was
-- claimed, so a probe whose node died is claimed again).
CREATE TABLE touba.binding_circuits (
  tool_ref TEXT PRIMARY KEY,
  state    TEXT NOT NULL CHECK (state IN ('closed', 'open', 'probing')),
  until    TEXT NOT NULL DEFAULT '',
  since    TEXT NOT NULL,
  calls    INTEGER NOT NULL DEFAULT 0,
  failures INTEGER NOT NULL DEFAULT 0,
  node_id  TEXT NOT NULL DEFAULT '') WITH (fillfactor = 50);

-- The leasable entries by trigger: while a trigger is paused the lease
-- walks the triggers in this index and seeks past a paused trigger's
-- entries instead of reading them (holds.go, pickAround).
CREATE INDEX entries_ready_trigger ON touba.entries (trigger_ref, queue_id COLLATE "C") WHERE status = 'pending' AND NOT held;
