-- Per-key concurrency (SPEC §2.1 `concurrency`). Each entry carries the key
-- its trigger resolved at intake (compact JSON, scoped by trigger_ref) and
-- the trigger's max at that time. An entry is "active" while pending,
-- running or parked; a pending entry is held (held = 1) while it is not
-- among the first conc_max active entries of its key, in queue_id
-- (acceptance) order. The lease takes only pending entries with held = 0,
-- and every change that makes an entry leave the active set (done, failed)
-- releases the next ones in the same transaction, so the order holds
-- across retries, restarts and crashes.
ALTER TABLE entries ADD COLUMN conc_key TEXT;
ALTER TABLE entries ADD COLUMN conc_max INTEGER NOT NULL DEFAULT 0;
ALTER TABLE entries ADD COLUMN held INTEGER NOT NULL DEFAULT 0;

-- The active entries of one key in acceptance order: release and the
-- held-at-enqueue decision read the first conc_max rows of it.
CREATE INDEX entries_key ON entries (trigger_ref, conc_key, queue_id)
  WHERE conc_key IS NOT NULL AND status IN ('pending', 'running', 'parked');

-- What the lease reads: pending entries that are not held, oldest first.
-- Held entries stay out of it, so a long line behind one key costs the
-- lease nothing. (A partial index on queue_id alone is not chosen by the
-- planner over entries_status.)
CREATE INDEX entries_ready ON entries (status, held, queue_id);
