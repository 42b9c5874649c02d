-- One row per accepted delivery. The identity (trigger_ref, event_id) is
-- unique while the row exists; retention purges bodies, never identities of
-- entries that can still run.
CREATE TABLE entries (
  queue_id      TEXT PRIMARY KEY,
  trigger_ref   TEXT NOT NULL,
  event_id      TEXT NOT NULL,           -- '' when the request carried none
  digest        TEXT NOT NULL,           -- lowercase hex SHA-256 of the raw body
  body          BLOB,                    -- NULL once purged by retention
  headers       TEXT NOT NULL,           -- JSON object, lowercase names
  remote_addr   TEXT NOT NULL,
  received_at   TEXT NOT NULL,
  status        TEXT NOT NULL CHECK (status IN ('pending','running','done','failed','parked')),
  attempts      INTEGER NOT NULL DEFAULT 0,
  not_before    TEXT,                    -- earliest next lease (retry backoff)
  error_code    TEXT,
  error_message TEXT,
  updated_at    TEXT NOT NULL
) STRICT;

CREATE UNIQUE INDEX entries_identity ON entries (trigger_ref, event_id) WHERE event_id != '';
CREATE INDEX entries_status ON entries (status, queue_id);
