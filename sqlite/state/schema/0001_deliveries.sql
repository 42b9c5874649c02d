-- The delivery log: every request that did not create a queue entry
-- (duplicates and rejections), with its code. Bodies only for requests that
-- passed signature verification.
CREATE TABLE deliveries (
  seq          INTEGER PRIMARY KEY,
  delivery_id  TEXT NOT NULL UNIQUE,
  at           TEXT NOT NULL,
  trigger_ref  TEXT NOT NULL,
  event_id     TEXT NOT NULL,
  digest       TEXT NOT NULL,
  status_code  INTEGER NOT NULL,
  error_code   TEXT NOT NULL,           -- '' for a 202 duplicate
  queue_id     TEXT NOT NULL,           -- '' when none exists
  remote_addr  TEXT NOT NULL,
  headers      TEXT NOT NULL,           -- JSON object
  body         BLOB                     -- NULL: not stored (not verified) or pruned
) STRICT;
CREATE INDEX deliveries_at ON deliveries (at);
CREATE INDEX deliveries_code ON deliveries (error_code, seq);
CREATE INDEX deliveries_bodies ON deliveries (seq) WHERE body IS NOT NULL;

CREATE TABLE log_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) STRICT;
INSERT INTO log_meta (key, value) VALUES ('body_bytes', 0);
