-- The operator's audit trail: every replay, resolve and compensation an
-- operator asked for, with what it did. Effect-level detail is also in the
-- journal's effect_events; this table names the queue entry and the
-- delivery, so `queue show` can tell an entry's whole story.
CREATE TABLE operator_events (
  seq       INTEGER PRIMARY KEY,
  at        TEXT NOT NULL,
  action    TEXT NOT NULL,              -- queue.replay | deliveries.replay | effects.resolve | effects.compensate
  queue_id  TEXT NOT NULL,              -- '' when none concerns it
  target    TEXT NOT NULL,              -- the queue id, delivery id or scope/effect id acted on
  outcome   TEXT NOT NULL,              -- done | refused
  operator  TEXT NOT NULL,              -- who asked: uid and pid of the CLI
  detail    TEXT NOT NULL
) STRICT;
CREATE INDEX operator_events_queue ON operator_events (queue_id, seq);
