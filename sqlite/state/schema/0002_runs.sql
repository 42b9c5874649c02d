-- Run checkpoints: one row per dispatcher run of an entry, and the output
-- of every step that completed, so a re-run (after a crash or a replay)
-- starts from the first step without an output.
CREATE TABLE runs (
  run_id        TEXT PRIMARY KEY,
  queue_id      TEXT NOT NULL,
  trigger_ref   TEXT NOT NULL,
  attempt       INTEGER NOT NULL,
  status        TEXT NOT NULL,          -- running | done | failed | parked | retry | interrupted
  error_code    TEXT,
  error_message TEXT,
  started_at    TEXT NOT NULL,
  ended_at      TEXT
) STRICT;
CREATE INDEX runs_queue ON runs (queue_id, started_at);

CREATE TABLE run_steps (
  queue_id  TEXT NOT NULL,
  step_id   TEXT NOT NULL,
  run_id    TEXT NOT NULL,
  output    TEXT NOT NULL,              -- JSON
  at        TEXT NOT NULL,
  PRIMARY KEY (queue_id, step_id)
) STRICT;
