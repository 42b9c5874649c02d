-- Paused triggers (SPEC §6 triggers pause): the lease skips their entries,
-- which wait pending; intake still accepts them. A row per paused trigger.
CREATE TABLE paused_triggers (
  trigger_ref TEXT PRIMARY KEY,
  paused_at   TEXT NOT NULL,
  operator    TEXT NOT NULL,
  reason      TEXT NOT NULL DEFAULT ''
) STRICT;

-- The leasable entries by trigger: while a trigger is paused the lease
-- walks this index trigger by trigger, seeking past a paused trigger's
-- entries instead of reading them (holds.go). Partial: an entry is in it
-- only while it waits pending.
CREATE INDEX entries_ready_trigger ON entries (trigger_ref, queue_id) WHERE status = 'pending' AND held = 0;
