-- Schedule cursors (SPEC §2.3, issue 42): the newest tick each schedule
-- trigger enqueued, moved forward in the transaction that enqueues the
-- tick (enqueue.go) and never forgotten by --history, which deletes
-- entries only. Without it the newest tick was read from the entries, so
-- a tick forgotten after it ran, while an older one was kept (failed),
-- was enqueued again at the next start. tick_id is the tick's event id,
-- RFC 3339 UTC, which sorts as its time.
--
-- A new table: the previous release never reads or writes it, and still
-- finds its ticks in the entries, as this release does beside the cursor.
CREATE TABLE schedule_cursors (
  trigger_ref TEXT PRIMARY KEY,
  tick_id     TEXT NOT NULL
) STRICT;

-- The newest tick of each trigger in the entries, as the previous release
-- wrote them (the form LatestTickID reads): --history may forget it later.
INSERT INTO schedule_cursors (trigger_ref, tick_id)
  SELECT trigger_ref, MAX(event_id) FROM entries
  WHERE event_id != ''
    AND event_id GLOB '[0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]Z'
  GROUP BY trigger_ref;
