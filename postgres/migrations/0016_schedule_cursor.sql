-- Schedule cursors (SPEC §2.3, issue 42): the newest tick each schedule
-- trigger enqueued, on any node, moved forward in the transaction that
-- enqueues the tick (queue_tick.go) and never forgotten by --history,
-- which drops and deletes entries only. Without it the newest tick was
-- read from the entries, so a tick forgotten after it ran, while an older
-- one was kept (failed), was enqueued again at the next start. tick_id is
-- the tick's event id, RFC 3339 UTC, which sorts as its time in any
-- collation.
--
-- Expand only: a new table, which the previous release never reads or
-- writes; it still finds its ticks in the entries, as this release does
-- beside the cursor.
CREATE TABLE touba.schedule_cursors (
  trigger_ref TEXT PRIMARY KEY,
  tick_id     TEXT NOT NULL);
-- touba:commit

-- The newest tick of each trigger in the entries, as the previous release
-- wrote them (the form LatestTickID reads): --history may forget it later.
-- A read of entries under ACCESS SHARE, which no read or write of the
-- previous release waits for; a tick it enqueues meanwhile is in the
-- entries, which LatestTickID reads as well.
INSERT INTO touba.schedule_cursors (trigger_ref, tick_id)
  SELECT trigger_ref, max(event_id) FROM touba.entries
  WHERE event_id <> '' AND event_id ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$'
  GROUP BY trigger_ref
  ON CONFLICT (trigger_ref) DO UPDATE SET tick_id = EXCLUDED.tick_id
  WHERE touba.schedule_cursors.tick_id < EXCLUDED.tick_id;
