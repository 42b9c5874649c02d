-- Paused triggers (SPEC §6 triggers pause): the lease skips their entries,
-- which wait pending; intake still accepts them. A row per paused trigger.
CREATE TABLE paused_triggers (
  trigger_ref TEXT PRIMARY KEY,
  paused_at   TEXT NOT NULL,
  operator    TEXT NOT NULL,
  reason      TEXT NOT NULL DEFAULT ''
) STRICT;
